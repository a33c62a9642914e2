package daemon

// The test resolver's Validator is the zero one, which asks the tool
// registry of the process: link the daemon's tools (agent_manager, the
// session tools) that the shipped master and worker name, as the binary does.
import _ "github.com/openstarry/openstarry-edge/core/daemon/agenttool"
