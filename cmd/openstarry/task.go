package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/transport/broker"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

type taskSendFlags struct {
	mqtt      mqttFlags
	agent     string
	input     string
	taskID    string
	typ       string
	deadline  string
	fleet     bool
	wait      bool
	timeout   time.Duration
	republish time.Duration
}

func newTaskCmd() *cobra.Command {
	taskCmd := &cobra.Command{
		Use:   "task",
		Short: "Send tasks to agents over MQTT",
		Args:  cobra.NoArgs,
	}
	var f taskSendFlags
	send := &cobra.Command{
		Use:   "send --agent ID --input TEXT|@FILE",
		Short: "Publish a task (QoS 1); with --wait, print its result",
		Long: `Publish a task to an agent's task topic, or with --fleet to the fleet topic.

--input is JSON when it parses as JSON, else it is sent as a JSON string;
@FILE reads it from a file. With --wait the result is printed as JSON, and
the exit status is 0 for "done", 1 for "failed" or "unknown_outcome" or no
result within --timeout.

With --fleet, the task is published again every --republish (10s) while no
device has claimed it, until one does, its deadline passes or --timeout ends:
a device that is down keeps its share of the fleet topic, and the next copy
goes to the next device (one task id runs once fleet-wide: the claim decides).
Without --wait, the command returns once a device claimed the task.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return taskSend(cmd, f)
		},
	}
	fl := send.Flags()
	f.mqtt.bindClient(fl, "broker URL: tcp://, mqtt://, ssl://, mqtts:// HOST[:PORT]; default tcp://"+broker.DefaultListen)
	fl.StringVar(&f.agent, "agent", envOr("OPENSTARRY_AGENT", ""), "agent id (env OPENSTARRY_AGENT)")
	fl.StringVar(&f.input, "input", "", "task input: JSON, else text; @FILE reads a file")
	fl.StringVar(&f.taskID, "task-id", "", "task id; default a new random one")
	fl.StringVar(&f.typ, "type", "", "task type")
	fl.StringVar(&f.deadline, "deadline", "", "deadline: RFC 3339 time, or a duration from now (10m); a task not started by then fails")
	fl.BoolVar(&f.fleet, "fleet", false, "publish to the fleet topic (any agent of the fleet takes it)")
	fl.BoolVar(&f.wait, "wait", false, "wait for the result and print it")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the connection and, with --wait, the result (with --fleet: for a device's claim)")
	fl.DurationVar(&f.republish, "republish", mqtt.DefaultRepublish, "with --fleet: publish the task again after this long without a device's claim (0: never)")
	taskCmd.AddCommand(send)
	return taskCmd
}

func taskSend(cmd *cobra.Command, f taskSendFlags) error {
	if f.agent == "" && !f.fleet {
		return errors.New("--agent is required (or --fleet)")
	}
	if f.input == "" {
		return errors.New("--input is required")
	}
	input, err := taskInput(f.input)
	if err != nil {
		return err
	}
	id := f.taskID
	if id == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		id = "t-" + hex.EncodeToString(b)
	}
	if err := agent.ValidateID(id); err != nil {
		return fmt.Errorf("--task-id: %w", err)
	}
	deadline, err := taskDeadline(f.deadline, time.Now())
	if err != nil {
		return err
	}
	task, err := json.Marshal(agent.Task{TaskID: id, Type: f.typ, Input: input, Deadline: deadline})
	if err != nil {
		return err
	}
	o := mqtt.SendOptions{
		Broker: orDefault(f.mqtt.broker, "tcp://"+broker.DefaultListen), Username: f.mqtt.username, Password: f.mqtt.password,
		CAFile: f.mqtt.ca, CertFile: f.mqtt.cert, KeyFile: f.mqtt.key, TopicPrefix: f.mqtt.prefix,
		Agent: f.agent, Fleet: f.fleet, Wait: f.wait, Timeout: f.timeout, Republish: f.republish,
		Notice: func(msg string) { fmt.Fprintln(cmd.ErrOrStderr(), "openstarry: "+msg) },
	}
	if f.republish == 0 {
		o.Republish = -1 // never
	} else if f.republish < 0 {
		return errors.New("--republish must not be negative")
	}
	if !f.fleet {
		if o.Device, err = f.mqtt.deviceID(); err != nil {
			return err
		}
	}
	res, err := mqtt.SendTask(cmd.Context(), o, task)
	if err != nil {
		return mqttHint(err)
	}
	out := cmd.OutOrStdout()
	if !f.wait {
		line, _ := json.Marshal(map[string]string{"task_id": id, "status": "published"})
		fmt.Fprintln(out, string(line))
		return nil
	}
	fmt.Fprintln(out, string(res))
	var r struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(res, &r)
	if r.Status != agent.ResultDone {
		return exitCode(exitFailure, fmt.Errorf("task %s ended %s", id, r.Status))
	}
	return nil
}

// taskInput turns --input into JSON: JSON as is, other text as a JSON
// string; @FILE reads the file (one trailing newline of a text file is
// dropped).
func taskInput(arg string) (json.RawMessage, error) {
	data := []byte(arg)
	if name, ok := strings.CutPrefix(arg, "@"); ok {
		var err error
		if data, err = os.ReadFile(name); err != nil {
			return nil, fmt.Errorf("--input: %w", err)
		}
	}
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && json.Valid(trimmed) {
		return json.RawMessage(trimmed), nil
	}
	if strings.HasPrefix(arg, "@") {
		data = bytes.TrimSuffix(bytes.TrimSuffix(data, []byte("\n")), []byte("\r"))
	}
	s, _ := json.Marshal(string(data))
	return s, nil
}

// taskDeadline turns --deadline into RFC 3339: a time as is, a duration
// from now.
func taskDeadline(arg string, now time.Time) (string, error) {
	if arg == "" {
		return "", nil
	}
	if _, err := time.Parse(time.RFC3339, arg); err == nil {
		return arg, nil
	}
	d, err := time.ParseDuration(arg)
	if err != nil {
		return "", fmt.Errorf("--deadline %q is neither an RFC 3339 time nor a duration", arg)
	}
	return now.Add(d).UTC().Format(time.RFC3339), nil
}
