package llm

import "context"

// Chat sends one user message through c, for tests of the client alone.
func Chat(c *Client, ctx context.Context, user string) (Completion, error) {
	return c.Chat(ctx, &chatRequest{Messages: []chatMessage{text("user", user)}}, nil)
}

// ErrorDetails exposes errorDetails to the tests.
var ErrorDetails = errorDetails
