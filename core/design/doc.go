// Package design is the Design Layer: agent blueprints (templates), their
// decoding and validation, and where they come from.
//
// A template is frozen when an agent starts: the host reads it once, records
// its name, version and digest in the agent's working variables
// (Resolved.Vars), and never re-reads it while the process lives.
//
// # Validation
//
// A template is valid when it satisfies template.schema.json (embedded;
// JSON Schema draft 2020-12, additionalProperties false everywhere) and the
// rules a schema cannot state, checked in Go: every tool is known to the
// tool registry (Validator.KnownTool), only a master names workers, and,
// over a set of templates (a directory, the embedded templates), names are
// unique, each file is {name}.json, and every worker a master names exists
// in the set with role worker. Validate, Load and LoadDir report every
// broken rule at once as ValidationErrors: file, JSON pointer, rule,
// message, one line each. The schema is checked by the JSON Schema library
// (github.com/santhosh-tekuri/jsonschema/v6, built from
// third_party/jsonschema), whose error kinds schemaErrors maps to that
// shape; the schema is compiled on the first validation in a process, never
// at start.
//
// The daemon, `openstarry run`, `templates validate` and the design server
// validate; an agent process the daemon starts does not: LoadFrozen checks
// that its blueprint has the digest of the bytes the daemon validated and
// froze, and decodes them, so neither the schema nor the library's
// meta-schemas are ever compiled there.
//
// # Where templates come from
//
// Resolver.Resolve takes a template name or a path to a .json file. A file
// is read and validated on its own. A name goes, in order:
//
//   - with a design layer configured (design.url): to the Fetcher only —
//     the design layer, then its cache. The local directory and the
//     embedded templates are not consulted, so a device never silently
//     boots a blueprint its design layer did not serve;
//   - otherwise: to the local directory (DATA/templates or --templates),
//     then to the templates embedded in the binary (Shipped). A file in the
//     directory hides the embedded template of the same name, even when the
//     file is invalid: the operator's file is reported, not replaced.
//
// # The remote design layer and its cache
//
// Fetcher.Get asks GET {url}/templates/{name}, sending the cached ETag in
// If-None-Match. The cache keeps the last good copy of each template:
//
//	{CacheDir}/{name}.json       the exact bytes served
//	{CacheDir}/{name}.meta.json  etag, signature, digest, fetched_at, url, version
//
// Both files are written atomically (temp file, fsync, rename, directory
// fsync), the sidecar last. Every use of a cached copy re-checks it: its
// digest against the sidecar, the schema and rules, the name, and, when
// trusted keys are configured, its signature. A byte changed in the cache is
// refused, never booted.
//
// What the design layer's answer leads to, after the retries a transient
// failure earns (timeout, refused connection, 408, 425, 429, 5xx):
//
//	200                      validate (+ verify the signature) → cache → boot it ("remote")
//	304                      boot the cached copy ("remote"; fetched_at renewed)
//	404/410 with JSON code   the template was withdrawn: error ErrNotFound, the cached
//	"template_not_found"     copy is deleted, nothing boots
//	anything else            boot the cached copy ("cache") and log one warning line;
//	                         with no usable cached copy: ErrUnavailable naming the URL
//	                         and the cache path
//
// "Anything else" includes other 4xx (401, 403: a device's credentials or a
// proxy are wrong; that is the design layer being unavailable to the device,
// not a statement about the template), a 404 that is not the design layer's
// own JSON answer (a proxy, a captive portal, a wrong design.url path), an
// invalid template, and a bad or missing signature.
//
// Why a design-layer 404 does not fall back: it is an answer, not an
// absence. Withdrawing a template from the design layer is the one way an
// operator can stop a fleet from running a blueprint (a broken prompt, a
// tool that must not run); falling back to the cache — or keeping the cache
// for the next offline boot — would defeat it. `openstarry design serve`
// refuses to start on an empty directory so that an unmounted volume cannot
// withdraw everything at once.
//
// # Signatures
//
// With trusted keys configured, a template is accepted from the design layer
// or the cache only with a detached ed25519 signature over its exact bytes
// by one of the keys, sent as "X-Openstarry-Signature: ed25519:<base64>"
// (optionally "ed25519:<key id>:<base64>", KeyID). Templates from a local
// directory, a file or the binary are the operator's own and are not
// verified. A signature proves who published the bytes, not when: a
// man-in-the-middle can replay an older signed version, so keys complement
// TLS (https design.url), they do not replace it.
package design
