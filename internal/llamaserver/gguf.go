package llamaserver

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// The GGUF container (version 3), as llama.cpp reads it: a header, typed
// key/value metadata, tensor descriptions, then the tensor data, each
// tensor aligned to 32 bytes. Only what a float32 model needs is written.
// https://github.com/ggml-org/ggml/blob/master/docs/gguf.md

const (
	ggufMagic     = "GGUF"
	ggufVersion   = 3
	ggufAlignment = 32
)

// Metadata value types.
const (
	typeUint32  = 4
	typeInt32   = 5
	typeFloat32 = 6
	typeBool    = 7
	typeString  = 8
	typeArray   = 9
)

// ggmlF32 is ggml's type id of float32 tensors.
const ggmlF32 = 0

// GGUF is a model file being assembled: metadata and float32 tensors.
type GGUF struct {
	kv      []kv
	tensors []Tensor
}

type kv struct {
	key string
	val any // uint32, int32, float32, bool, string, []string, []float32, []int32
}

// Tensor is one float32 tensor. Shape is in ggml's order: Shape[0] is the
// length of a row (the input dimension of a weight matrix), Shape[1] the
// number of rows. Data holds Shape[0]*Shape[1]*... values, row after row.
type Tensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// Set adds a metadata key. Values: uint32, int32, float32, bool, string,
// []string, []float32 or []int32.
func (g *GGUF) Set(key string, val any) {
	switch val.(type) {
	case uint32, int32, float32, bool, string, []string, []float32, []int32:
	default:
		panic(fmt.Sprintf("gguf: key %s: unsupported value type %T", key, val))
	}
	g.kv = append(g.kv, kv{key, val})
}

// Add adds a tensor; its data length must match its shape.
func (g *GGUF) Add(t Tensor) {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	if n != len(t.Data) {
		panic(fmt.Sprintf("gguf: tensor %s: shape %v holds %d values, data has %d", t.Name, t.Shape, n, len(t.Data)))
	}
	g.tensors = append(g.tensors, t)
}

// WriteTo writes the file.
func (g *GGUF) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: bufio.NewWriter(w)}
	le := binary.LittleEndian
	put := func(v any) { _ = binary.Write(cw, le, v) }
	str := func(s string) { put(uint64(len(s))); _, _ = io.WriteString(cw, s) }

	_, _ = io.WriteString(cw, ggufMagic)
	put(uint32(ggufVersion))
	put(uint64(len(g.tensors)))
	put(uint64(len(g.kv)))
	for _, e := range g.kv {
		str(e.key)
		switch v := e.val.(type) {
		case uint32:
			put(uint32(typeUint32))
			put(v)
		case int32:
			put(uint32(typeInt32))
			put(v)
		case float32:
			put(uint32(typeFloat32))
			put(v)
		case bool:
			put(uint32(typeBool))
			b := uint8(0)
			if v {
				b = 1
			}
			put(b)
		case string:
			put(uint32(typeString))
			str(v)
		case []string:
			put(uint32(typeArray))
			put(uint32(typeString))
			put(uint64(len(v)))
			for _, s := range v {
				str(s)
			}
		case []float32:
			put(uint32(typeArray))
			put(uint32(typeFloat32))
			put(uint64(len(v)))
			put(v)
		case []int32:
			put(uint32(typeArray))
			put(uint32(typeInt32))
			put(uint64(len(v)))
			put(v)
		}
	}
	var off uint64
	for _, t := range g.tensors {
		str(t.Name)
		put(uint32(len(t.Shape)))
		for _, d := range t.Shape {
			put(uint64(d))
		}
		put(uint32(ggmlF32))
		put(off)
		off = align(off + uint64(4*len(t.Data)))
	}
	pad := func() {
		if n := align(uint64(cw.n)) - uint64(cw.n); n > 0 {
			_, _ = cw.Write(make([]byte, n))
		}
	}
	pad()
	for _, t := range g.tensors {
		buf := make([]byte, 4*len(t.Data))
		for i, f := range t.Data {
			le.PutUint32(buf[4*i:], math.Float32bits(f))
		}
		_, _ = cw.Write(buf)
		pad()
	}
	if cw.err != nil {
		return cw.n, cw.err
	}
	return cw.n, cw.w.(*bufio.Writer).Flush()
}

func align(n uint64) uint64 { return (n + ggufAlignment - 1) / ggufAlignment * ggufAlignment }

type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}
