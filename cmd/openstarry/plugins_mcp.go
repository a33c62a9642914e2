//go:build !no_mcp

package main

// Tools of Model Context Protocol servers; a build with -tags no_mcp leaves
// the SDK out, and a template naming MCP servers then refuses to start.
import _ "github.com/openstarry/openstarry-edge/transport/mcp"

// mcpCompiledIn is what version says of MCP.
const mcpCompiledIn = "yes"
