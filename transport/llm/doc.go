// Package llm is the openai brain: a client for the chat completions API
// that OpenAI-compatible model servers share (Ollama, llama.cpp's server,
// vLLM, hosted services), and the agent.Brain built on it.
//
// The client sends the system prompt, the summary of what left the window,
// the resume context of a resumed session, the context window, the task and
// the tool calls of the task so far, with the agent's tools as function
// definitions, and turns the answer into tool calls or a final output. It
// retries 429 and 5xx answers with exponential backoff and jitter, honouring
// Retry-After, up to a retry budget; a server that cannot be reached at all is
// reported as agent.ErrBrainUnavailable so that the kernel keeps the task
// waiting instead of failing it. The package holds no state between turns:
// everything a turn needs is in the agent.Turn, which the kernel saves.
package llm
