package profile_test

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"modelplane/engine"
	"modelplane/sim"
	"modelplane/sim/profile"
)

// The demo versions' profiles, as app/demo.go declares them.
const (
	demoV42 = `{"prefill_ms_per_token":0.05,"decode_base_ms":12,"decode_ms_per_seq":0.35,"kv_mb_per_token":0.8,"usable_gb":13}`
	demoV43 = `{"prefill_ms_per_token":0.05,"decode_base_ms":23,"decode_ms_per_seq":0.65,"kv_mb_per_token":0.8,"usable_gb":13}`
	demoV23 = `{"latency_ms":{"p50":8,"p99":21},"error_rate":0.001,"score":{"mean":0.12,"sd":0.18},"class_balance":{"legit":0.97,"fraud":0.03}}`
	demoV24 = `{"latency_ms":{"p50":8,"p99":21},"error_rate":0.001,"score":{"mean":0.49,"sd":0.28},"class_balance":{"legit":0.6,"fraud":0.4}}`
)

// seedProfile is v42: the seed documents' GPU memory figures and step times.
func seedProfile() profile.Profile {
	p, err := profile.Parse([]byte(demoV42))
	if err != nil {
		panic(err)
	}
	return p
}

// TestPagesArithmetic pins the page count to the seed documents' figures:
// a page is 0.8 MB/token × 16 tokens = 12.8 MB, and 13 GB usable holds
// 13,000,000,000 / 12,800,000 = 1,015.6, so 1,015 whole pages (the seed
// documents say "~1,020").
func TestPagesArithmetic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		p             profile.Profile
		wantPageBytes int64
		wantPages     int
	}{
		{"seed figures", profile.Profile{KVMBPerToken: 0.8, UsableGB: 13}, 12_800_000, 1015},
		{"32-token pages", profile.Profile{KVMBPerToken: 0.8, UsableGB: 13, PageTokens: 32}, 25_600_000, 507},
		{"whole H100 less 26 GB of weights", profile.Profile{KVMBPerToken: 0.8, UsableGB: 54}, 12_800_000, 4218},
		{"exact fit", profile.Profile{KVMBPerToken: 0.5, UsableGB: 0.008}, 8_000_000, 1},
		{"one byte short of a page", profile.Profile{KVMBPerToken: 0.5, UsableGB: 0.007999999}, 8_000_000, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.p.PageBytes(); got != tt.wantPageBytes {
				t.Errorf("PageBytes() = %d; want %d", got, tt.wantPageBytes)
			}
			if got := tt.p.Pages(); got != tt.wantPages {
				t.Errorf("Pages() = %d; want %d", got, tt.wantPages)
			}
		})
	}
	s, err := sim.NewScheduler(sim.Config{Profile: seedProfile()})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.KVPages(); got != 1015 {
		t.Errorf("scheduler KV pages = %d; want 1015", got)
	}
}

func TestParseDemo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		json    string
		wantLLM bool
	}{
		{"v42", demoV42, true},
		{"v43", demoV43, true},
		{"v23", demoV23, false},
		{"v24", demoV24, false},
		{"empty", ``, false},
		{"empty object", `{}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := profile.Parse([]byte(tt.json))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := p.IsLLM(); got != tt.wantLLM {
				t.Errorf("IsLLM() = %v; want %v", got, tt.wantLLM)
			}
			if tt.wantLLM {
				want := profile.Profile{PageTokens: 16, KVReserve: profile.ReserveFinal, MaxBatch: 256, TenantBatchShare: 1, TenantKVShare: 1}
				got := profile.Profile{PageTokens: p.PageTokens, KVReserve: p.KVReserve, MaxBatch: p.MaxBatch, TenantBatchShare: p.TenantBatchShare, TenantKVShare: p.TenantKVShare}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("defaults = %+v; want %+v", got, want)
				}
			}
		})
	}
	p, _ := profile.Parse([]byte(demoV23))
	want := profile.ClassBalance{{"legit", 0.97}, {"fraud", 0.03}}
	if !reflect.DeepEqual(p.ClassBalance, want) {
		t.Errorf("class_balance = %v; want %v in the listed order", p.ClassBalance, want)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"class_balance":{"legit":0.97,"fraud":0.03}`) {
		t.Errorf("Marshal = %s; want the classes in order", b)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		json string
		want string
	}{
		{"misspelt key", `{"decode_base_ms":12,"kv_mb_per_token":0.8,"usable_gb":13,"decode_ms_per_sequence":1}`, "decode_ms_per_sequence"},
		{"not an object", `[1]`, "invalid sim profile"},
		{"trailing data", `{} {}`, "data after"},
		{"mixed", `{"decode_base_ms":12,"kv_mb_per_token":0.8,"usable_gb":13,"error_rate":0.1,"score":{"mean":0.5,"sd":0.1}}`, "mixes"},
		{"no decode base", `{"kv_mb_per_token":0.8,"usable_gb":13}`, "decode_base_ms"},
		{"no kv size", `{"decode_base_ms":12,"usable_gb":13}`, "kv_mb_per_token"},
		{"no memory", `{"decode_base_ms":12,"kv_mb_per_token":0.8}`, "usable_gb"},
		{"memory under a page", `{"decode_base_ms":12,"kv_mb_per_token":0.8,"usable_gb":0.01}`, "holds no page"},
		{"too many pages", `{"decode_base_ms":12,"kv_mb_per_token":0.001,"usable_gb":100000}`, "limit"},
		{"negative cost", `{"decode_base_ms":12,"decode_ms_per_seq":-1,"kv_mb_per_token":0.8,"usable_gb":13}`, "decode_ms_per_seq"},
		{"bad reserve", `{"decode_base_ms":12,"kv_mb_per_token":0.8,"usable_gb":13,"kv_reserve":"all"}`, "kv_reserve"},
		{"share above 1", `{"decode_base_ms":12,"kv_mb_per_token":0.8,"usable_gb":13,"tenant_kv_share":1.5}`, "tenant_kv_share"},
		{"negative batch", `{"decode_base_ms":12,"kv_mb_per_token":0.8,"usable_gb":13,"max_batch":-1}`, "max_batch"},
		{"output mean 0", `{"decode_base_ms":12,"kv_mb_per_token":0.8,"usable_gb":13,"output_tokens":{"mean":0}}`, "output_tokens"},
		{"p99 below p50", `{"latency_ms":{"p50":10,"p99":5}}`, "latency_ms"},
		{"error rate above 1", `{"error_rate":2}`, "error_rate"},
		{"negative sd", `{"score":{"mean":0.5,"sd":-1}}`, "score"},
		{"class twice", `{"class_balance":{"a":1,"a":2}}`, "twice"},
		{"classes add to 0", `{"class_balance":{"a":0}}`, "class_balance"},
		{"class share not a number", `{"class_balance":{"a":"x"}}`, "class_balance"},
		{"class without a label", `{"class_balance":{"":1}}`, "non-empty class labels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := profile.Parse([]byte(tt.json))
			if err == nil {
				t.Fatalf("Parse(%s) = nil; want an error about %q", tt.json, tt.want)
			}
			if !errors.Is(err, profile.ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name %q", err, tt.want)
			}
		})
	}
}

func TestLengthDistDraw(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		d        profile.LengthDist
		wantMean float64
		wantSD   float64
		wantMax  int
	}{
		{"constant", profile.LengthDist{Mean: 200}, 200, 0, 200},
		{"spread", profile.LengthDist{Mean: 200, SD: 120}, 200, 120, 0},
		{"capped", profile.LengthDist{Mean: 200, SD: 120, Max: 250}, 0, 0, 250},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(1, 2))
			const n = 20000
			var sum, sq float64
			most := 0
			for range n {
				x := tt.d.Draw(r)
				if x < 1 {
					t.Fatalf("Draw = %d; want at least 1", x)
				}
				most = max(most, x)
				sum += float64(x)
				sq += float64(x) * float64(x)
			}
			mean := sum / n
			sd := math.Sqrt(sq/n - mean*mean)
			if tt.wantMean > 0 && math.Abs(mean-tt.wantMean) > 0.03*tt.wantMean {
				t.Errorf("mean = %.1f; want %.1f ± 3%%", mean, tt.wantMean)
			}
			if tt.wantSD > 0 && math.Abs(sd-tt.wantSD) > 0.1*tt.wantSD {
				t.Errorf("sd = %.1f; want %.1f ± 10%%", sd, tt.wantSD)
			}
			if tt.wantMax > 0 && most > tt.wantMax {
				t.Errorf("max draw = %d; want at most %d", most, tt.wantMax)
			}
		})
	}
}

// FuzzParse checks that any input either fails with
// ErrInvalid or gives a valid profile that survives a JSON round
// trip and, for an LLM, a working scheduler.
func FuzzParse(f *testing.F) {
	for _, s := range []string{demoV42, demoV43, demoV23, demoV24, `{}`, `null`,
		`{"decode_base_ms":1,"kv_mb_per_token":0.8,"usable_gb":0.2,"page_tokens":8,"max_batch":4,"kv_reserve":"step","max_prefill_tokens":64,"max_model_len":512,"tenant_batch_share":0.5,"tenant_kv_share":0.25,"output_tokens":{"mean":50,"sd":20,"max":100}}`,
		`{"value":{"mean":3.2,"sd":0.9},"latency_ms":{"p50":1,"p99":1}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := profile.Parse(data)
		if err != nil {
			if !errors.Is(err, profile.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("parsed profile fails Validate: %v", err)
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		again, err := profile.Parse(b)
		if err != nil {
			t.Fatalf("Parse(Marshal(p)) = %v; json %s", err, b)
		}
		if !reflect.DeepEqual(again, p) {
			t.Fatalf("round trip changed the profile:\n%+v\n%+v", p, again)
		}
		if !p.IsLLM() {
			return
		}
		s, err := sim.NewScheduler(sim.Config{Profile: p, Seed: 1})
		if err != nil {
			t.Fatalf("sim.NewScheduler(valid profile): %v", err)
		}
		if s.KVPages() != p.Pages() || p.Pages() < 1 {
			t.Fatalf("KV pages = %d; profile says %d", s.KVPages(), p.Pages())
		}
		if err := s.Submit(engine.Request{ID: "x", PromptTokens: 1, OutputTokens: 1}); err == nil {
			if res := s.Step(0); res.Duration <= 0 || len(res.Events) != 1 || !res.Events[0].Last {
				t.Fatalf("one-token request: step %+v; want one last token and a positive duration", res)
			}
		}
	})
}

// Keys must match exactly: encoding/json alone would accept any case.
func TestParseExactKeys(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`{"Decode_Base_MS":12,"kv_mb_per_token":0.8,"usable_gb":13}`,
		`{"latency_ms":{"P50":1,"p99":3}}`,
	} {
		if _, err := profile.Parse([]byte(in)); !errors.Is(err, profile.ErrInvalid) {
			t.Errorf("Parse(%s) = %v; want ErrInvalid", in, err)
		}
	}
	if _, err := profile.Parse([]byte(`{"latency_ms":{"p50":1,"p99":3},"class_balance":{"Legit":0.9,"Fraud":0.1}}`)); err != nil {
		t.Errorf("class labels are free-form, got %v", err)
	}
}
