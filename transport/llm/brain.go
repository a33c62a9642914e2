package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/brain"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

func init() {
	plugin.Register(plugin.Info{ID: "brain.openai",
		Description: "OpenAI-compatible chat completions servers (Ollama, llama.cpp, vLLM, hosted)",
		New:         brain.Factory(func(cfg design.Brain) (agent.Brain, error) { return New(cfg) })})
}

// Brain is the openai brain: each step of a task is one chat completions
// request carrying the whole conversation the kernel saved.
type Brain struct {
	Client *Client
	Stream bool
}

// New builds the brain a template's brain section describes. The API key is
// read from the environment variable the template names; a named variable
// that is empty or unset is an error, so that a missing key is found at
// start, not at the first task.
func New(cfg design.Brain) (*Brain, error) {
	if cfg.BaseURL == "" || cfg.Model == "" {
		return nil, errors.New("openai brain: base_url and model are required")
	}
	c := &Client{BaseURL: cfg.BaseURL, Model: cfg.Model, MaxRetries: cfg.MaxRetries}
	if cfg.TimeoutMs > 0 {
		c.Timeout = time.Duration(cfg.TimeoutMs) * time.Millisecond
	}
	if cfg.APIKeyEnv != "" {
		c.APIKey = os.Getenv(cfg.APIKeyEnv)
		if c.APIKey == "" {
			return nil, fmt.Errorf("openai brain: environment variable %s (brain.api_key_env) is empty or unset", cfg.APIKeyEnv)
		}
	}
	return &Brain{Client: c, Stream: cfg.Stream}, nil
}

// anyObject is the parameters schema of a tool that declares none.
var anyObject = json.RawMessage(`{"type":"object"}`)

// ErrMalformed is wrapped when the model's answer is neither text nor a
// valid tool call: a call the server could not parse left in the text, a
// call cut off by the token limit, an answer that cannot be decoded.
var ErrMalformed = errors.New("the model's answer is neither text nor a valid tool call")

// MalformedRetries is how many times a malformed answer is asked for again
// before the task fails.
const MalformedRetries = 2

// Think implements agent.Brain. A malformed answer is asked for again up to
// MalformedRetries times; nothing of it is run. A prompt over the server's
// context is sent again with the oldest messages of the window left out
// (shrink).
func (b *Brain) Think(ctx context.Context, turn agent.Turn) (agent.Reply, error) {
	for attempt := 0; ; attempt++ {
		comp, err := b.ask(ctx, turn)
		if err == nil {
			err = checkAnswer(comp)
		}
		if err == nil {
			reply := agent.Reply{Calls: comp.Calls, Usage: comp.Usage}
			if len(comp.Calls) == 0 {
				reply.Output, _ = json.Marshal(comp.Content)
			}
			return reply, nil
		}
		if errors.Is(err, agent.ErrBrainUnavailable) || !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBadResponse) {
			return agent.Reply{}, err // a stream cut by a dropped connection is the server's absence, not a bad answer
		}
		if attempt >= MalformedRetries {
			return agent.Reply{}, fmt.Errorf("%d answers in a row were unusable, the last: %w", attempt+1, err)
		}
	}
}

// ask sends the turn, leaving out the oldest messages of the window while
// the server says the prompt is over its context.
func (b *Brain) ask(ctx context.Context, turn agent.Turn) (Completion, error) {
	for {
		req := BuildRequest(turn)
		req.Stream = b.Stream
		comp, err := b.Client.Chat(ctx, req, turn.OnTokens)
		var se *StatusError
		if err == nil || !errors.As(err, &se) || !se.ContextExceeded() {
			return comp, err
		}
		smaller, ok := shrink(turn, req, se)
		if !ok {
			return Completion{}, fmt.Errorf("%w (the prompt is over the model server's context even without the "+
				"conversation window: the system prompt, the task and its tool results alone; give the server a "+
				"larger context, llama-server's -c, or send less)", err)
		}
		turn = smaller
	}
}

// shrink returns the turn without the oldest messages of its window, about
// as many as the server said were too many (with a tenth of the context
// left for the answer), and false when there is nothing left to drop.
func shrink(turn agent.Turn, req *chatRequest, se *StatusError) (agent.Turn, bool) {
	if len(turn.History) == 0 {
		if turn.Memory == "" {
			return turn, false
		}
		turn.Memory = "" // the summary goes last
		return turn, true
	}
	size := 0
	for _, m := range req.Messages {
		if m.Content != nil {
			size += len(*m.Content)
		}
	}
	var excess int // bytes to leave out
	if se.PromptTokens > 0 && se.ContextTokens > 0 && se.PromptTokens > se.ContextTokens*9/10 {
		perToken := max(1, size/se.PromptTokens)
		excess = (se.PromptTokens - se.ContextTokens*9/10) * perToken
	} else {
		excess = size / 2
	}
	drop := 0
	for dropped := 0; drop < len(turn.History) && dropped < excess; drop++ {
		dropped += len(turn.History[drop].Content) + 16
	}
	turn.History = turn.History[max(drop, 1):]
	return turn, true
}

// checkAnswer refuses an answer that must not be used: text holding a
// tool call the server did not parse, tool calls cut off by the token
// limit, nothing at all.
func checkAnswer(c Completion) error {
	if len(c.Calls) > 0 {
		if c.FinishReason == "length" {
			return fmt.Errorf("%w: the answer reached the token limit inside a tool call", ErrMalformed)
		}
		return nil
	}
	for _, tag := range []string{"<tool_call>", "[TOOL_CALLS]", "<|tool_call|>", "<function=", "<|python_tag|>"} {
		if strings.Contains(c.Content, tag) {
			return fmt.Errorf("%w: the text holds %s that the server did not parse as a tool call: %s",
				ErrMalformed, tag, clip(c.Content, 200))
		}
	}
	if strings.TrimSpace(c.Content) == "" {
		return fmt.Errorf("%w: the answer is empty (finish_reason %q)", ErrMalformed, c.FinishReason)
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// BuildRequest turns a turn into the chat messages and tool definitions.
func BuildRequest(turn agent.Turn) *chatRequest {
	req := &chatRequest{Messages: make([]chatMessage, 0, len(turn.History)+4+2*len(turn.Steps))}
	if turn.SystemPrompt != "" {
		req.Messages = append(req.Messages, text("system", turn.SystemPrompt))
	}
	if turn.Memory != "" {
		req.Messages = append(req.Messages, text("system", "Summary of the earlier conversation:\n"+turn.Memory))
	}
	if turn.Resume != "" {
		// With the other system messages at the start: some servers'
		// chat templates refuse a system message anywhere else.
		req.Messages = append(req.Messages, text("system", turn.Resume))
	}
	for _, m := range turn.History {
		switch m.Role {
		case "user", "assistant", "system":
			req.Messages = append(req.Messages, text(m.Role, m.Content))
		case "tool":
			// Tool results of finished tasks lose their call ids; the
			// model reads them as its own notes.
			req.Messages = append(req.Messages, text("assistant", "(tool "+m.Name+" returned) "+m.Content))
		}
	}
	req.Messages = append(req.Messages, text("user", taskText(turn.Task)))
	for s, st := range turn.Steps {
		am := chatMessage{Role: "assistant"}
		for i, c := range st.Calls {
			args := string(c.Args)
			if args == "" {
				args = "{}"
			}
			quoted, _ := json.Marshal(args)
			am.ToolCalls = append(am.ToolCalls, toolCall{ID: callID(c.ID, s, i), Type: "function",
				Function: functionCall{Name: c.Tool, Arguments: quoted}})
		}
		req.Messages = append(req.Messages, am)
		for i, res := range st.Results {
			content := string(res.Output)
			if res.Error != "" {
				content = "error: " + res.Error
			}
			if content == "" {
				content = "null"
			}
			id := res.CallID
			if i < len(st.Calls) {
				id = callID(st.Calls[i].ID, s, i)
			}
			req.Messages = append(req.Messages, chatMessage{Role: "tool", Content: &content, ToolCallID: id})
		}
	}
	for _, t := range turn.Tools {
		params := t.Parameters
		if len(params) == 0 {
			params = anyObject
		}
		desc := t.Description
		if !t.Idempotent && !strings.Contains(desc, "Not idempotent") {
			desc += " Not idempotent: a repeated call repeats its effect."
		}
		req.Tools = append(req.Tools, toolDef{Type: "function",
			Function: functionDef{Name: t.Name, Description: desc, Parameters: params}})
	}
	return req
}

func callID(id string, step, i int) string {
	if id != "" {
		return id
	}
	return fmt.Sprintf("call_%d_%d", step, i)
}

func text(role, content string) chatMessage { return chatMessage{Role: role, Content: &content} }

// taskText is the user message of a task: its input as text, a JSON string
// as its text and anything else as JSON.
func taskText(t agent.Task) string {
	var s string
	if json.Unmarshal(t.Input, &s) == nil {
		return s
	}
	return string(t.Input)
}

// summaryPrompt asks the model to fold messages into the running summary.
const summaryPrompt = "You keep the working memory of an agent. Rewrite the summary so that it also covers the " +
	"messages below, which are leaving the agent's context window. Keep names, numbers, file paths, decisions " +
	"and open questions; drop pleasantries. Answer with the new summary only, at most 200 words."

// Summarize implements agent.Summarizer with one request without tools.
func (b *Brain) Summarize(ctx context.Context, previous string, dropped []agent.Message) (string, error) {
	var sb strings.Builder
	if previous != "" {
		sb.WriteString("Summary so far:\n" + previous + "\n\n")
	}
	sb.WriteString("Messages leaving the window:\n")
	for _, m := range dropped {
		c := m.Content
		if len(c) > 2000 {
			c = c[:2000] + "…"
		}
		if m.Role == "tool" {
			fmt.Fprintf(&sb, "[tool %s] %s\n", m.Name, c)
		} else {
			fmt.Fprintf(&sb, "[%s] %s\n", m.Role, c)
		}
	}
	req := &chatRequest{Messages: []chatMessage{text("system", summaryPrompt), text("user", sb.String())}}
	comp, err := b.Client.Chat(ctx, req, nil)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(comp.Content)
	if s == "" {
		return "", errors.New("the model answered with an empty summary")
	}
	return s, nil
}

// Interface guards.
var (
	_ agent.Brain      = (*Brain)(nil)
	_ agent.Summarizer = (*Brain)(nil)
)
