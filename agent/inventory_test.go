package agent

import (
	"strings"
	"testing"

	"modelplane/busapi"
)

// layout renders a GPU as "TYPE:profile,profile" for compact table checks.
func layout(g busapi.GPU) string {
	var ps []string
	for _, s := range g.Slices {
		ps = append(ps, s.Profile)
	}
	return g.Type + ":" + strings.Join(ps, ",")
}

func TestParseInventory(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		gpus []string
		mig  string
		want []string
	}{
		{"one type", []string{"2xA100-80GB"}, "", []string{"A100-80GB:full", "A100-80GB:full"}},
		{"no count means one", []string{"H100-80GB"}, "", []string{"H100-80GB:full"}},
		{"lower case is normalised", []string{"1xa100-80gb"}, "", []string{"A100-80GB:full"}},
		{"comma separated in order", []string{"1xA100-80GB,2xH100-80GB"}, "", []string{"A100-80GB:full", "H100-80GB:full", "H100-80GB:full"}},
		{"repeated flag in order", []string{"1xH100-80GB", "1xA100-80GB"}, "", []string{"H100-80GB:full", "A100-80GB:full"}},
		{"seven 1g slices", []string{"2xA100-80GB"}, "0:7x1g.10gb",
			[]string{"A100-80GB:" + strings.Repeat("mig-1g.10gb,", 6) + "mig-1g.10gb", "A100-80GB:full"}},
		{"3g plus 4g", []string{"2xA100-80GB"}, "1:3g.40gb+4g.40gb", []string{"A100-80GB:full", "A100-80GB:mig-3g.40gb,mig-4g.40gb"}},
		{"two layouts", []string{"2xH100-80GB"}, "0:7x1g.10gb,1:3g.40gb+4g.40gb",
			[]string{"H100-80GB:" + strings.Repeat("mig-1g.10gb,", 6) + "mig-1g.10gb", "H100-80GB:mig-3g.40gb,mig-4g.40gb"}},
		{"whole GPU as MIG", []string{"A100-80GB"}, "0:7g.80gb", []string{"A100-80GB:mig-7g.80gb"}},
		{"mixed with prefix and case", []string{"A100-80GB"}, "0:MIG-2g.20gb+2x1G.10GB+3g.40gb", []string{"A100-80GB:mig-2g.20gb,mig-1g.10gb,mig-1g.10gb,mig-3g.40gb"}},
		{"two 3g fill the memory", []string{"A100-80GB"}, "0:2x3g.40gb", []string{"A100-80GB:mig-3g.40gb,mig-3g.40gb"}},
		{"spaces tolerated", []string{" 1xA100-80GB , 1xH100-80GB "}, " 1 : 3g.40gb ", []string{"A100-80GB:full", "H100-80GB:mig-3g.40gb"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseInventory(tt.gpus, tt.mig)
			if err != nil {
				t.Fatalf("ParseInventory(%q, %q): %v", tt.gpus, tt.mig, err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d GPUs, want %d", len(got), len(tt.want))
			}
			for i, g := range got {
				if g.Index != i {
					t.Errorf("gpu %d: index %d", i, g.Index)
				}
				if layout(g) != tt.want[i] {
					t.Errorf("gpu %d: got %s, want %s", i, layout(g), tt.want[i])
				}
				if g.MemoryMB != 81920 {
					t.Errorf("gpu %d: memory %d MB, want 81920", i, g.MemoryMB)
				}
				if g.MIG != (g.Slices[0].Profile != busapi.ProfileFull) {
					t.Errorf("gpu %d: MIG %v with slices %s", i, g.MIG, layout(g))
				}
				for j, s := range g.Slices {
					if s.Index != j {
						t.Errorf("gpu %d slice %d: index %d", i, j, s.Index)
					}
				}
			}
		})
	}
}

func TestParseInventoryRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		gpus []string
		mig  string
		want string // part of the error
	}{
		{"nothing", nil, "", "at least one GPU"},
		{"empty items", []string{" , "}, "", "at least one GPU"},
		{"no memory in type", []string{"2xA100"}, "", `gpu type "A100"`},
		{"garbage type", []string{"2x!!"}, "", "gpu type"},
		{"zero count", []string{"0xA100-80GB"}, "", "count 0"},
		{"too many", []string{"65xA100-80GB"}, "", "count 65"},
		{"too many in total", []string{"40xA100-80GB,40xH100-80GB"}, "", "more than 64"},
		{"over compute", []string{"A100-80GB"}, "0:4g.40gb+4g.40gb", "7 compute slices"},
		{"over compute by count", []string{"A100-80GB"}, "0:8x1g.10gb", "count 8"},
		{"over memory", []string{"A100-80GB"}, "0:3g.40gb+3g.40gb+1g.10gb", "8 memory slices"},
		{"unknown profile", []string{"A100-80GB"}, "0:5g.50gb", "unknown MIG profile"},
		{"gpu out of range", []string{"2xA100-80GB"}, "2:1g.10gb", "gpu 2 does not exist"},
		{"negative gpu", []string{"2xA100-80GB"}, "-1:1g.10gb", "gpu index"},
		{"no colon", []string{"A100-80GB"}, "1g.10gb", "GPU:LAYOUT"},
		{"empty layout", []string{"A100-80GB"}, "0:", "empty partition"},
		{"dangling plus", []string{"A100-80GB"}, "0:3g.40gb+", "empty partition"},
		{"two layouts for one gpu", []string{"A100-80GB"}, "0:3g.40gb,0:4g.40gb", "two layouts"},
		{"MIG on a 40 GB GPU", []string{"A100-40GB"}, "0:1g.10gb", "80 GB GPUs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseInventory(tt.gpus, tt.mig)
			if err == nil {
				t.Fatalf("ParseInventory(%q, %q) = %d GPUs, want an error", tt.gpus, tt.mig, len(got))
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

func TestProfileMemoryMB(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		typ, profile string
		want         int
		ok           bool
	}{
		{"A100-80GB", "full", 81920, true},
		{"h100-80gb", "full", 81920, true},
		{"A100-80GB", "mig-1g.10gb", 10240, true},
		{"A100-80GB", "mig-2g.20gb", 20480, true},
		{"H100-80GB", "mig-3g.40gb", 40960, true},
		{"H100-80GB", "mig-4g.40gb", 40960, true},
		{"H100-80GB", "mig-7g.80gb", 81920, true},
		{"A100-40GB", "full", 40960, true},
		{"A100-40GB", "mig-1g.10gb", 0, false},
		{"A100-80GB", "1g.10gb", 0, false},
		{"A100", "full", 0, false},
	} {
		got, ok := ProfileMemoryMB(tt.typ, tt.profile)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ProfileMemoryMB(%q, %q) = %d, %v; want %d, %v", tt.typ, tt.profile, got, ok, tt.want, tt.ok)
		}
	}
}

func TestConfigValidateNamesBadSettings(t *testing.T) {
	t.Parallel()
	gpus, err := ParseInventory([]string{"A100-80GB"}, "")
	if err != nil {
		t.Fatal(err)
	}
	good := Config{Node: "gpu-node-07", GPUs: gpus, StateDir: t.TempDir()}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tt := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no node", func(c *Config) { c.Node = "" }, "node: required"},
		{"dotted node", func(c *Config) { c.Node = "gpu.7" }, "node:"},
		{"no gpus", func(c *Config) { c.GPUs = nil }, "gpus:"},
		{"bad gpu index", func(c *Config) {
			c.GPUs = []busapi.GPU{{Index: 1, MemoryMB: 1, Slices: []busapi.Slice{{Profile: "full"}}}}
		}, "gpus: gpu 0 has index 1"},
		{"no state dir", func(c *Config) { c.StateDir = "" }, "state dir"},
		{"heartbeat over half the lease", func(c *Config) { c.Heartbeat = 10_000_000_000 }, "heartbeat 10s"},
		{"negative spool", func(c *Config) { c.SpoolMaxBytes = -1 }, "spool max bytes"},
	} {
		c := good
		tt.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate() = %v, want an error saying %q", tt.name, err, tt.want)
		}
	}
}

// FuzzParseInventory checks that any --gpus/--mig input either fails with
// an error or yields an inventory that keeps the rules: GPUs and slices
// indexed in order, known upper-case types, known profiles, and MIG
// layouts within the compute and memory budgets.
func FuzzParseInventory(f *testing.F) {
	f.Add("8xA100-80GB", "")
	f.Add("4xA100-80GB,4xH100-80GB", "0:7x1g.10gb,1:3g.40gb+4g.40gb")
	f.Add("2xh100-80gb", "1:2g.20gb+2g.20gb+3g.40gb")
	f.Add("A100-80GB", "0:7g.80gb")
	f.Add("99999999999999999999xA100-80GB", "")
	f.Add("3xA100-80GB", "2:+")
	f.Fuzz(func(t *testing.T, gpus, mig string) {
		inv, err := ParseInventory([]string{gpus}, mig)
		if err != nil {
			if inv != nil {
				t.Fatalf("error %v with an inventory", err)
			}
			return
		}
		if len(inv) == 0 || len(inv) > MaxGPUs {
			t.Fatalf("%d GPUs", len(inv))
		}
		if err := validInventory(inv); err != nil {
			t.Fatalf("inventory breaks its rules: %v", err)
		}
		for _, g := range inv {
			if g.Type != strings.ToUpper(g.Type) {
				t.Fatalf("type %q not upper case", g.Type)
			}
			if !g.MIG {
				if len(g.Slices) != 1 || g.Slices[0].Profile != busapi.ProfileFull {
					t.Fatalf("gpu %d without MIG has slices %v", g.Index, g.Slices)
				}
				continue
			}
			compute, memory := 0, 0
			for _, s := range g.Slices {
				p, ok := lookupMIG(s.Profile)
				if !ok || !strings.HasPrefix(s.Profile, busapi.MIGPrefix) {
					t.Fatalf("gpu %d: profile %q", g.Index, s.Profile)
				}
				compute += p.compute
				memory += p.memory
			}
			if compute > migComputeSlices || memory > migMemorySlices {
				t.Fatalf("gpu %d: layout over budget (%d compute, %d memory)", g.Index, compute, memory)
			}
		}
	})
}
