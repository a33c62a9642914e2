package llamaserver

import (
	_ "embed"
	"fmt"
	"math"
	"os"
	"strings"
)

// qwenTemplate is Qwen2.5-Instruct's chat template, from llama.cpp's
// models/templates: llama-server recognises its tool-call format
// (<tool_call>{"name": …, "arguments": …}</tool_call>) and constrains the
// calls with a grammar built from the tools' schemas.
//
//go:embed qwen2.5.jinja
var qwenTemplate string

// SlowWord, in a task's text, makes the model answer with Model.Slow
// repeated until the server's token limit (-n) or the context ends: a
// generation that lasts as long as a test needs.
const SlowWord = "<|slow|>"

// Model describes a tiny llama-architecture model whose weights are set by
// hand so that, at temperature 0, it behaves as a test needs:
//
//   - offered tools, with no tool result in the conversation yet, it calls
//     Call (a JSON object {"name": …, "arguments": {…}}), streamed in
//     pieces of about 12 bytes;
//   - once a tool result is in the conversation, it answers Answer;
//   - without tools, it answers Plain;
//   - when the conversation holds SlowWord, it answers Slow over and over
//     instead of Plain or Answer (it still calls Call first when offered
//     tools).
//
// The vocabulary is byte-level (every byte is a token), plus the ChatML
// special tokens, the tool-call tags, SlowWord, and the model's own answers
// as whole tokens. Two layers, width 64: the first layer's attention heads
// notice <tools>, <tool_response> and SlowWord anywhere before the current
// position; the output layer maps the current token and those three flags
// to the next token. The second layer and the feed-forward blocks are zero.
type Model struct {
	Call   string // default {"name": "file_append", "arguments": {"file": "notes.txt", "line": "hello"}}
	Answer string // default "done"
	Plain  string // default "hello"
	Slow   string // default "la"
	// ContextLength is the model's trained context, the server's default
	// -c; default 4096.
	ContextLength int
}

func (m Model) withDefaults() Model {
	if m.Call == "" {
		m.Call = `{"name": "file_append", "arguments": {"file": "notes.txt", "line": "hello"}}`
	}
	if m.Answer == "" {
		m.Answer = "done"
	}
	if m.Plain == "" {
		m.Plain = "hello"
	}
	if m.Slow == "" {
		m.Slow = "la"
	}
	if m.ContextLength == 0 {
		m.ContextLength = 4096
	}
	return m
}

// Token types of llama.cpp's vocabulary.
const (
	tokNormal      = 1
	tokUnknown     = 2
	tokControl     = 3
	tokUserDefined = 4
	tokByte        = 6
)

// The residual stream's dimensions.
const (
	dBias  = 0 // 1 in every token's embedding
	dOther = 1 // the identity of every token the model does not care about
	// Markers (tokens the attention heads look for) and the flags the
	// heads write when they saw one: head h reads dMarker+h, writes dFlag+h.
	dMarker = 2 // <tools>, <tool_response>, SlowWord
	dFlag   = 5
	// The tokens whose successor the output layer decides.
	dNewline  = 8
	dCallOpen = 9
	dCallEnd  = 10
	dAnswer   = 11
	dPlain    = 12
	dSlow     = 13
	dChunk0   = 14 // the pieces of Call, in order

	width   = 64
	nHead   = 4
	headDim = width / nHead
	nLayer  = 2
)

// Write writes the model as GGUF to path.
func (m Model) Write(path string) error {
	g, err := m.build()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := g.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// spm is how the llama (SentencePiece) vocabulary spells a piece: spaces
// as U+2581.
func spm(s string) string { return strings.ReplaceAll(s, " ", "\u2581") }

// chunks splits s into pieces of about n bytes, each different from the
// others and from every other token, cutting only between UTF-8 characters.
func chunks(s string, n int, taken map[string]bool) []string {
	var out []string
	cur := ""
	for _, r := range s {
		cur += string(r)
		if len(cur) >= n && !taken[cur] {
			out = append(out, cur)
			taken[cur] = true
			cur = ""
		}
	}
	if cur != "" {
		if taken[cur] && len(out) > 0 {
			delete(taken, out[len(out)-1])
			cur = out[len(out)-1] + cur
			out = out[:len(out)-1]
		}
		out = append(out, cur)
		taken[cur] = true
	}
	return out
}

func (m Model) build() (*GGUF, error) {
	m = m.withDefaults()
	var (
		tokens []string
		types  []int32
		ident  []int // the residual dimension of each token's identity
	)
	add := func(text string, typ int32, dim int) int {
		tokens = append(tokens, text)
		types = append(types, typ)
		ident = append(ident, dim)
		return len(tokens) - 1
	}
	add("<unk>", tokUnknown, dOther)
	add("<s>", tokControl, dOther)
	add("</s>", tokControl, dOther)
	for b := 0; b < 256; b++ {
		dim := dOther
		if b == '\n' {
			dim = dNewline
		}
		add(fmt.Sprintf("<0x%02X>", b), tokByte, dim)
	}
	add("<|im_start|>", tokControl, dOther)
	imEnd := add("<|im_end|>", tokControl, dOther)
	add("<|endoftext|>", tokControl, dOther)
	callOpen := add("<tool_call>", tokUserDefined, dCallOpen)
	callEnd := add("</tool_call>", tokUserDefined, dCallEnd)
	add("<tool_response>", tokUserDefined, dMarker+1)
	add("</tool_response>", tokUserDefined, dOther)
	add("<tools>", tokUserDefined, dMarker+0)
	add("</tools>", tokUserDefined, dOther)
	add(SlowWord, tokUserDefined, dMarker+2)
	taken := map[string]bool{}
	for _, t := range tokens {
		taken[t] = true
	}
	answers := map[string]int{}
	for _, a := range []struct {
		text string
		dim  int
	}{{m.Answer, dAnswer}, {m.Plain, dPlain}, {m.Slow, dSlow}} {
		t := spm(a.text)
		if taken[t] {
			return nil, fmt.Errorf("tiny model: answer %q is also another token", a.text)
		}
		taken[t] = true
		answers[t] = add(t, tokNormal, a.dim)
	}
	// The call as the Qwen format writes it: on its own line between the
	// tags.
	pieces := chunks(spm("\n"+m.Call+"\n"), 12, taken)
	if dChunk0+len(pieces) > width {
		return nil, fmt.Errorf("tiny model: call too long (%d pieces, at most %d)", len(pieces), width-dChunk0)
	}
	first := -1
	chunkIDs := make([]int, len(pieces))
	for i, p := range pieces {
		chunkIDs[i] = add(p, tokNormal, dChunk0+i)
		if i == 0 {
			first = chunkIDs[i]
		}
	}
	nv := len(tokens)

	// Embeddings: the bias and the identity, both 1, so that every token's
	// vector has the same norm and RMS normalisation scales them alike.
	emb := make([]float32, nv*width)
	for t := 0; t < nv; t++ {
		emb[t*width+dBias] = 1
		emb[t*width+ident[t]] = 1
	}
	normed := float32(math.Sqrt(width / 2)) // a coordinate of 1 after RMS norm

	// Output: logit[token] = row · h. The current token's identity picks
	// its successor with weight 10; at the start of an answer (after the
	// newline of "<|im_start|>assistant\n") the flags decide, with margins
	// of at least 1 between the winner and the rest:
	//   tool result and SlowWord: Slow; tool result: Answer;
	//   tools: the call; SlowWord: Slow; nothing: Plain.
	out := make([]float32, nv*width)
	set := func(tok, dim int, v float32) { out[tok*width+dim] = v }
	const T, R, L = dFlag + 0, dFlag + 1, dFlag + 2
	set(callOpen, dNewline, 10)
	set(callOpen, T, 2)
	set(callOpen, R, -5)
	set(answers[spm(m.Plain)], dNewline, 11)
	a := answers[spm(m.Answer)]
	set(a, dNewline, 10)
	set(a, R, 4)
	set(a, L, -3)
	s := answers[spm(m.Slow)]
	set(s, dNewline, 10)
	set(s, dSlow, 10)
	set(s, L, 3)
	set(s, R, 2)
	set(s, T, -2)
	set(first, dCallOpen, 10)
	for i := 1; i < len(chunkIDs); i++ {
		set(chunkIDs[i], dChunk0+i-1, 10)
	}
	set(callEnd, dChunk0+len(chunkIDs)-1, 10)
	set(imEnd, dCallEnd, 10)
	set(imEnd, dAnswer, 10)
	set(imEnd, dPlain, 10)

	g := &GGUF{}
	g.Set("general.architecture", "llama")
	g.Set("general.name", "openstarry-tiny")
	g.Set("general.alignment", uint32(ggufAlignment))
	g.Set("llama.context_length", uint32(m.ContextLength))
	g.Set("llama.embedding_length", uint32(width))
	g.Set("llama.block_count", uint32(nLayer))
	g.Set("llama.feed_forward_length", uint32(width))
	g.Set("llama.attention.head_count", uint32(nHead))
	g.Set("llama.attention.head_count_kv", uint32(nHead))
	g.Set("llama.attention.layer_norm_rms_epsilon", float32(1e-6))
	// The heads use only the last pair of dimensions of each head, which
	// RoPE turns by base^(-14/16) radians per position: with this base,
	// well under 0.01 radian over the whole context.
	g.Set("llama.rope.freq_base", float32(1e8))
	g.Set("llama.rope.dimension_count", uint32(headDim))
	g.Set("llama.vocab_size", uint32(nv))
	g.Set("tokenizer.ggml.model", "llama")
	g.Set("tokenizer.ggml.tokens", tokens)
	g.Set("tokenizer.ggml.scores", make([]float32, nv))
	g.Set("tokenizer.ggml.token_type", types)
	g.Set("tokenizer.ggml.unknown_token_id", uint32(0))
	g.Set("tokenizer.ggml.bos_token_id", uint32(1))
	g.Set("tokenizer.ggml.eos_token_id", uint32(imEnd))
	g.Set("tokenizer.ggml.add_bos_token", false)
	g.Set("tokenizer.ggml.add_eos_token", false)
	g.Set("tokenizer.ggml.add_space_prefix", false)
	g.Set("tokenizer.chat_template", qwenTemplate)

	ones := make([]float32, width)
	for i := range ones {
		ones[i] = 1
	}
	g.Add(Tensor{Name: "token_embd.weight", Shape: []int{width, nv}, Data: emb})
	g.Add(Tensor{Name: "output_norm.weight", Shape: []int{width}, Data: ones})
	g.Add(Tensor{Name: "output.weight", Shape: []int{width, nv}, Data: out})
	for l := 0; l < nLayer; l++ {
		q := make([]float32, width*width)
		k := make([]float32, width*width)
		v := make([]float32, width*width)
		o := make([]float32, width*width)
		if l == 0 {
			for h := 0; h < 3; h++ {
				row := h*headDim + headDim - 1
				q[row*width+dBias] = 4              // every position asks …
				k[row*width+dMarker+h] = 1          // … for the marker; score 4·normed²/√16 = 32
				v[row*width+dMarker+h] = 1          // the marker says "seen" …
				o[(dFlag+h)*width+row] = 1 / normed // … as a flag of about 1
			}
		}
		p := fmt.Sprintf("blk.%d.", l)
		g.Add(Tensor{Name: p + "attn_norm.weight", Shape: []int{width}, Data: ones})
		g.Add(Tensor{Name: p + "attn_q.weight", Shape: []int{width, width}, Data: q})
		g.Add(Tensor{Name: p + "attn_k.weight", Shape: []int{width, width}, Data: k})
		g.Add(Tensor{Name: p + "attn_v.weight", Shape: []int{width, width}, Data: v})
		g.Add(Tensor{Name: p + "attn_output.weight", Shape: []int{width, width}, Data: o})
		g.Add(Tensor{Name: p + "ffn_norm.weight", Shape: []int{width}, Data: ones})
		g.Add(Tensor{Name: p + "ffn_gate.weight", Shape: []int{width, width}, Data: make([]float32, width*width)})
		g.Add(Tensor{Name: p + "ffn_up.weight", Shape: []int{width, width}, Data: make([]float32, width*width)})
		g.Add(Tensor{Name: p + "ffn_down.weight", Shape: []int{width, width}, Data: make([]float32, width*width)})
	}
	return g, nil
}
