package metrics

import (
	"bufio"
	"bytes"
	"io"
	"strings"
)

// help is the # HELP text of the daemon's families. A family without one
// gets no # HELP line (its # TYPE stays): an empty "# HELP name" says
// nothing and reads as a mistake.
var help = map[string]string{
	"openstarry_build_info":                  "The build: version, revision, Go version and platform in the labels; always 1.",
	"openstarry_daemon_start_time_seconds":   "When the daemon started, in seconds since the Unix epoch.",
	"openstarry_boot_phase_duration_seconds": "How long each of the four boot phases took.",
	"openstarry_infra_enabled":               "1 when the infrastructure plugin runs, 0 when the configuration turned it off (it then has no openstarry_infra_up).",
	"openstarry_infra_up":                    "1 when the infrastructure plugin is ready and healthy.",
	"openstarry_infra_mqtt_connected":        "1 while the daemon's MQTT client is connected to the broker or hub.",
	"openstarry_infra_mqtt_embedded_broker":  "1 when the MQTT broker is the one embedded in the daemon.",
	"openstarry_worker_handoffs_pending":     "Results of workers not yet handed to the agent that asked for them.",
	"openstarry_interrupted_agents":          "Agents whose snapshot was not closed cleanly when the daemon booted.",
	"openstarry_agent_up":                    "1 when the agent's process runs.",
	"openstarry_agent_state":                 "The agent's process state, one-hot over the state label.",
	"openstarry_agent_restarts_total":        "Times the daemon restarted the agent's process.",
	"openstarry_agent_ticks_total":           "The agent's tick_index: events it has processed.",
	"openstarry_agent_queue_depth":           "Events in the agent's queue, the one running included.",
	"openstarry_agent_outbox_depth":          "Results saved and not yet confirmed delivered.",
	"openstarry_agent_ready_seconds":         "How long the agent's last start took until it listened.",
	SaveDuration:                             "Duration of the agent's snapshot saves (durable when they return).",
}

// withHelp copies text to w, giving each empty "# HELP name" line the
// family's help text, or dropping it when there is none.
func withHelp(w io.Writer, text []byte) {
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	bw := bufio.NewWriter(w)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "# HELP "); ok && !strings.Contains(name, " ") {
			h, known := help[name]
			if !known {
				continue
			}
			line += " " + h
		}
		bw.WriteString(line)
		bw.WriteByte('\n')
	}
	bw.Flush()
}
