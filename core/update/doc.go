// Package update replaces the openstarry binary of a device with a signed
// new version and puts the previous one back when the new one does not
// prove itself.
//
// The updatable binary lives in the data directory, DATA/bin/openstarry
// (the slot), beside DATA/bin/openstarry.prev (the version before it) and,
// while one is being installed, DATA/bin/openstarry.new. The binary the
// package manager installed (/usr/bin/openstarry, what the service runs)
// is never written: at boot it reads the journal and, when the slot holds
// a kept version, replaces itself with it (exec, same process). So the
// installed binary is the fallback that always boots, whatever is in the
// data directory.
//
// The journal, DATA/bin/update.json, is replaced atomically and fsynced at
// every step; it is the only state. The steps and what a restart at any
// instant finds:
//
//	stage    .new written, fsynced, verified         journal: unchanged, or staged
//	         → boot: staged is aborted, .new removed; the old slot runs
//	prev     the running binary kept as .prev        journal: unchanged
//	trial    journal written before the swap          journal: trial
//	swap     rename .new → slot, directory fsynced
//	         → boot: trial, slot is not the new one: aborted, the old slot runs
//	         → boot: trial, slot is the new one: the guard runs it on trial
//	commit   master online and /healthz 200           journal: committed
//	rollback rename .prev → slot                      journal: rolled_back
//
// On trial the daemon does not run the new binary itself: a guard (the
// previous version's code, known to work) runs it as a child with
// OPENSTARRY_UPDATE_ROLE=trial and polls the control API until the new
// version reports its master running and /healthz answers 200. Each start
// of the child counts as a boot in the journal, before it happens; more
// than update.max_boots boots, or no health within update.trial_timeout,
// and the guard renames .prev back over the slot and execs it. A guard
// killed at any point is a trial boot again at the next start.
//
// A candidate is refused before the swap unless SHA256SUMS beside it is
// signed by a trusted fleet key and lists its sha256, its build info names
// this platform, and, run as `version --json`, it declares a snapshot
// schema version this build can read (so that a rollback still loads every
// snapshot the new version wrote).
package update
