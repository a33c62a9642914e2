package enroll

import (
	"context"
	"errors"
	"fmt"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// OperatorRole is the broker role of the fleet's operators.
const OperatorRole = "openstarry-operator"

// OperatorACLs are what an operator may do on the hub: publish signed
// commands, tasks to one agent and fleet tasks; subscribe to everything
// under the prefix (statuses, telemetry, results, replies, dead letters,
// and the topics it publishes to, which is how `fleet command` and `task
// send` see that the hub took a publication).
func OperatorACLs(prefix string) []map[string]any {
	acl := func(typ, topic string) map[string]any {
		return map[string]any{"acltype": typ, "topic": topic, "allow": true}
	}
	return []map[string]any{
		acl("publishClientSend", prefix+"/+/commands/+"),
		acl("publishClientSend", prefix+"/+/agents/+/tasks"),
		acl("publishClientSend", prefix+"/fleet/tasks"),
		acl("subscribePattern", prefix+"/#"),
	}
}

// AddOperator creates the operator role (or adds its rules to it) and the
// client name with password and that role. For a client that exists it
// sets the password and adds the role: created is false.
func AddOperator(ctx context.Context, ctl Controller, prefix, name, password string) (created bool, err error) {
	if err := agent.ValidateID(name); err != nil {
		return false, fmt.Errorf("operator name: %w", err)
	}
	if password == "" {
		return false, errors.New("operator password is empty")
	}
	acls := OperatorACLs(prefix)
	errs, err := ctl.Do(ctx,
		Command{"command": "createRole", "rolename": OperatorRole, "textname": "openstarry fleet operator", "acls": acls},
		Command{"command": "createClient", "username": name, "password": password, "textname": "openstarry operator " + name,
			"roles": []map[string]any{{"rolename": OperatorRole}}})
	if err != nil {
		return false, err
	}
	if errs[0] != nil && !IsExists(errs[0]) {
		return false, errs[0]
	}
	if errs[0] != nil { // the role was there: make sure it has every rule
		cmds := make([]Command, 0, len(acls))
		for _, a := range acls {
			cmds = append(cmds, Command{"command": "addRoleACL", "rolename": OperatorRole, "acltype": a["acltype"],
				"topic": a["topic"], "allow": true})
		}
		aerrs, err := ctl.Do(ctx, cmds...)
		if err != nil {
			return false, err
		}
		for _, e := range aerrs {
			if e != nil && !IsExists(e) {
				return false, e
			}
		}
	}
	if errs[1] == nil {
		return true, nil
	}
	if !IsExists(errs[1]) {
		return false, errs[1]
	}
	errs, err = ctl.Do(ctx,
		Command{"command": "setClientPassword", "username": name, "password": password},
		Command{"command": "addClientRole", "username": name, "rolename": OperatorRole})
	if err != nil {
		return false, err
	}
	if errs[0] != nil {
		return false, errs[0]
	}
	if e := errs[1]; e != nil {
		var de *DynSecError
		if !errors.As(e, &de) || de.Command != "addClientRole" {
			return false, e
		}
	}
	return false, nil
}
