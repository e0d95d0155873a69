package replica

import (
	"encoding/json"

	"modelplane/busapi"
)

// ParseLaunch reads a stored replicas.launch value: what the node
// runs for the replica (busapi.Launch), or nil when its node reported none
// (not started yet, or a simulated node, which launches no process).
func ParseLaunch(raw []byte) *busapi.Launch {
	if len(raw) == 0 {
		return nil
	}
	var l busapi.Launch
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil
	}
	return &l
}
