package llm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// DecodeStream reads a streamed answer (server-sent events of
// chat.completion.chunk objects, ended by "data: [DONE]") and assembles it.
// onTokens, when not nil, is told the number of pieces received so far (one
// piece is about one token), at most every interval.
func DecodeStream(r io.Reader, onTokens func(int), interval time.Duration) (Completion, error) {
	sc := bufio.NewScanner(io.LimitReader(r, maxResponseBytes))
	sc.Buffer(make([]byte, 4<<10), 1<<20)
	var (
		c       Completion
		text    strings.Builder
		calls   = map[int]*streamCall{}
		pieces  int
		last    time.Time
		done    bool
		sawData bool
	)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue // blank separators, comments, event: and id: fields
		}
		data := bytes.TrimSpace(line[len("data:"):])
		if string(data) == "[DONE]" {
			done = true
			break
		}
		sawData = true
		var ch chatResponse
		if err := json.Unmarshal(data, &ch); err != nil {
			return Completion{}, fmt.Errorf("%w: stream chunk: %v", ErrBadResponse, err)
		}
		if ch.Error != nil {
			return Completion{}, fmt.Errorf("%w: server error: %s", ErrBadResponse, ch.Error.Message)
		}
		if ch.Usage != nil {
			c.Usage = agent.Usage{PromptTokens: ch.Usage.PromptTokens, CompletionTokens: ch.Usage.CompletionTokens}
		}
		if len(ch.Choices) == 0 {
			continue
		}
		choice := ch.Choices[0]
		if choice.FinishReason != "" {
			c.FinishReason = choice.FinishReason
		}
		d := choice.Delta
		if d == nil {
			d = choice.Message
		}
		if d == nil {
			continue
		}
		if d.Content != nil && *d.Content != "" {
			text.WriteString(*d.Content)
			pieces++
		}
		for i, tc := range d.ToolCalls {
			idx := i
			if tc.Index != nil {
				idx = *tc.Index
			}
			if idx < 0 || idx > 1024 {
				return Completion{}, fmt.Errorf("%w: tool call index %d", ErrBadResponse, idx)
			}
			sc := calls[idx]
			if sc == nil {
				sc = &streamCall{}
				calls[idx] = sc
			}
			if tc.ID != "" {
				sc.id = tc.ID
			}
			if tc.Function.Name != "" {
				sc.name += tc.Function.Name
			}
			if err := sc.addArgs(tc.Function.Arguments); err != nil {
				return Completion{}, err
			}
			pieces++
		}
		if onTokens != nil && pieces > 0 && time.Since(last) >= interval {
			last = time.Now()
			onTokens(pieces)
		}
	}
	if err := sc.Err(); err != nil {
		return Completion{}, fmt.Errorf("%w: reading the stream: %w", ErrBadResponse, err)
	}
	if !done && !sawData {
		return Completion{}, fmt.Errorf("%w: empty stream", ErrBadResponse)
	}
	if !done {
		return Completion{}, fmt.Errorf("%w: the stream ended before [DONE]", ErrBadResponse)
	}
	if onTokens != nil && pieces > 0 {
		onTokens(pieces)
	}
	c.Content = text.String()
	idxs := make([]int, 0, len(calls))
	for i := range calls {
		idxs = append(idxs, i)
	}
	sort.Ints(idxs)
	for n, i := range idxs {
		sc := calls[i]
		args, _ := json.Marshal(sc.args.String())
		call, err := toAgentCall(toolCall{ID: sc.id, Function: functionCall{Name: sc.name, Arguments: args}}, n)
		if err != nil {
			return Completion{}, err
		}
		c.Calls = append(c.Calls, call)
	}
	return c, nil
}

// streamCall is one tool call being assembled from deltas.
type streamCall struct {
	id, name string
	args     strings.Builder
}

// addArgs appends one piece of the arguments: a JSON string fragment, or an
// object sent whole.
func (sc *streamCall) addArgs(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("%w: tool call arguments: %v", ErrBadResponse, err)
		}
		sc.args.WriteString(s)
		return nil
	}
	sc.args.Write(raw)
	return nil
}
