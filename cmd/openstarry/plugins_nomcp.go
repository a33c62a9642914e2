//go:build no_mcp

package main

// mcpCompiledIn is what version says of MCP: a template naming MCP servers
// refuses to start in this build.
const mcpCompiledIn = "not compiled in (no_mcp)"
