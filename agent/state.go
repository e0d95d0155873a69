package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"modelplane/busapi"
)

// savedState is the agent's state file: the desired set it last applied and
// where each replica serves. A restarted agent reads it to adopt what still
// runs, to restart what does not on the same port, and to keep serving
// before (or without) NATS telling it anything.
type savedState struct {
	Node       string         `json:"node"`
	Generation int64          `json:"generation"`
	Replicas   []savedReplica `json:"replicas"`
}

type savedReplica struct {
	Spec busapi.ReplicaSpec `json:"spec"`
	// Hash is specHash(Spec): a replica is adopted only when it runs the
	// same spec.
	Hash string `json:"hash"`
	Addr string `json:"addr,omitempty"`
}

const stateFile = "replicas.json"

// loadState reads the state file; a missing file is an empty state.
func loadState(dir string) (savedState, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return savedState{}, nil
	}
	if err != nil {
		return savedState{}, fmt.Errorf("read state file: %w", err)
	}
	var st savedState
	if err := json.Unmarshal(data, &st); err != nil {
		return savedState{}, fmt.Errorf("read state file: %w", err)
	}
	return st, nil
}

// writeState replaces the state file atomically and durably: temporary
// file, fsync, rename, fsync of the directory.
func writeState(dir string, data []byte) error {
	tmp := filepath.Join(dir, stateFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write state file: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, stateFile))
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write state file: %w", err)
	}
	return nil
}

// specHash identifies what a replica runs. The sim profile and the runtime
// settings are compacted first so that the control plane re-encoding them
// does not restart anything.
func specHash(s busapi.ReplicaSpec) string {
	for _, raw := range []*json.RawMessage{&s.Sim, &s.Settings} {
		if len(*raw) > 0 {
			var buf bytes.Buffer
			if json.Compact(&buf, *raw) == nil {
				*raw = buf.Bytes()
			}
		}
	}
	data, _ := json.Marshal(s)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:12])
}
