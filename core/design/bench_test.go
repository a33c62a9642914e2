package design

import (
	"io/fs"
	"testing"
)

// BenchmarkValidate measures one template validation (JSON syntax, the
// schema, the Go rules, the strict decode) of each shipped template, the
// schema already compiled: ns/op, B/op and allocs/op are per template.
func BenchmarkValidate(b *testing.B) {
	names, err := fs.Glob(Shipped(), "*.json")
	if err != nil || len(names) == 0 {
		b.Fatalf("no shipped templates: %v", err)
	}
	for _, name := range names {
		data, err := fs.ReadFile(Shipped(), name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			if _, err := (Validator{}).Validate(name, data); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := (Validator{}).Validate(name, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCompileSchema measures compiling template.schema.json, which the
// first validation in a process does once (the library's meta-schemas,
// compiled once per process before it, are not counted).
func BenchmarkCompileSchema(b *testing.B) {
	if _, err := compileSchema(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := compileSchema(); err != nil {
			b.Fatal(err)
		}
	}
}
