package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// The chat completions wire format: only the fields this package uses.

type chatRequest struct {
	Model         string         `json:"model"`
	Messages      []chatMessage  `json:"messages"`
	Tools         []toolDef      `json:"tools,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"` // null for an assistant message that only calls tools
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	Index    *int         `json:"index,omitempty"` // streamed deltas only
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function functionCall `json:"function"`
}

type functionCall struct {
	Name string `json:"name,omitempty"`
	// Arguments is a JSON string holding the arguments object; some
	// servers send the object itself, which decodeArguments accepts too.
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

type toolDef struct {
	Type     string      `json:"type"`
	Function functionDef `json:"function"`
}

type functionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

type chatResponse struct {
	Choices []struct {
		Message      *chatDelta `json:"message"`
		Delta        *chatDelta `json:"delta"`
		FinishReason string     `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
	Error *apiError `json:"error"`
}

// chatDelta is an answer's message, or a streamed piece of one.
type chatDelta struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	ToolCalls []toolCall `json:"tool_calls"`
}

type apiError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
}

// Completion is a decoded answer: text, tool calls, or both.
type Completion struct {
	Content      string
	Calls        []agent.Call
	FinishReason string
	Usage        agent.Usage
}

// ErrBadResponse is wrapped by the decoder's errors.
var ErrBadResponse = errors.New("undecodable model response")

// maxResponseBytes bounds one answer (or one streamed answer in total).
const maxResponseBytes = 8 << 20

// DecodeResponse decodes a (non-streamed) chat completions answer.
func DecodeResponse(data []byte) (Completion, error) {
	var r chatResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return Completion{}, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	if r.Error != nil {
		return Completion{}, fmt.Errorf("%w: server error: %s", ErrBadResponse, r.Error.Message)
	}
	if len(r.Choices) == 0 || r.Choices[0].Message == nil {
		return Completion{}, fmt.Errorf("%w: no choices[0].message", ErrBadResponse)
	}
	ch := r.Choices[0]
	c := Completion{FinishReason: ch.FinishReason}
	if ch.Message.Content != nil {
		c.Content = *ch.Message.Content
	}
	for i, tc := range ch.Message.ToolCalls {
		call, err := toAgentCall(tc, i)
		if err != nil {
			return Completion{}, err
		}
		c.Calls = append(c.Calls, call)
	}
	if r.Usage != nil {
		c.Usage = agent.Usage{PromptTokens: r.Usage.PromptTokens, CompletionTokens: r.Usage.CompletionTokens}
	}
	return c, nil
}

func toAgentCall(tc toolCall, i int) (agent.Call, error) {
	if tc.Function.Name == "" {
		return agent.Call{}, fmt.Errorf("%w: tool call %d has no function name", ErrBadResponse, i)
	}
	id := tc.ID
	if id == "" {
		id = fmt.Sprintf("call_%d", i)
	}
	return agent.Call{ID: id, Tool: tc.Function.Name, Args: decodeArguments(tc.Function.Arguments)}, nil
}

// decodeArguments turns the wire's arguments into the call's JSON: the
// object inside a JSON string, or an object sent as is. Text that is not
// JSON is kept as a JSON string, so that the tool's argument check reports it
// to the model and the snapshot stays valid JSON.
func decodeArguments(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil
		}
		return textArgs(s)
	}
	if json.Valid(raw) {
		return append(json.RawMessage(nil), raw...)
	}
	return textArgs(string(raw))
}

func textArgs(s string) json.RawMessage {
	t := strings.TrimSpace(s)
	if t == "" {
		return nil
	}
	if json.Valid([]byte(t)) {
		return json.RawMessage(t)
	}
	quoted, _ := json.Marshal(s)
	return quoted
}
