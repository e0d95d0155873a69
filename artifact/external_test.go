package artifact

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// onnxExternal builds, with the real onnx package, models whose tensors keep
// their data in another file: one naming a file of the manifest, the others
// naming files outside the model directory, or not in the manifest, from an
// initializer, a Constant node's attribute and an If node's subgraph.
const onnxExternal = `
import sys, os
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
out = sys.argv[1]
def ext(t, loc):
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    for k, v in (("location", loc), ("offset", "0"), ("length", "16")):
        e = t.external_data.add(); e.key, e.value = k, v
def model(loc=None, const_loc=None, sub_loc=None):
    X = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])
    Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])
    W = numpy_helper.from_array(np.frombuffer(b"AAAA" * 4, dtype=np.float32).copy(), "W")
    if loc: ext(W, loc)
    nodes = [helper.make_node("Add", ["X", "W"], ["Y"])]
    inits = [W]
    if const_loc:
        c = numpy_helper.from_array(np.zeros(4, dtype=np.float32), "c")
        ext(c, const_loc)
        nodes.append(helper.make_node("Constant", [], ["C"], value=c))
    if sub_loc:
        s = numpy_helper.from_array(np.zeros(4, dtype=np.float32), "S")
        ext(s, sub_loc)
        SO = helper.make_tensor_value_info("SO", TensorProto.FLOAT, [4])
        g = helper.make_graph([helper.make_node("Identity", ["S"], ["SO"])], "branch", [], [SO], initializer=[s])
        inits.append(numpy_helper.from_array(np.array(True), "cond"))
        nodes.append(helper.make_node("If", ["cond"], ["Z"], then_branch=g, else_branch=g))
    g = helper.make_graph(nodes, "g", [X], [Y], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
cases = {
    "manifest": model("weights.dat"),
    "dotdot": model("../../../etc/shadow"),
    "absolute": model("/proc/self/environ"),
    "unlisted": model("other.dat"),
    "constant": model(None, const_loc="/etc/passwd"),
    "subgraph": model(None, sub_loc="../secret.dat"),
    "inline": model(None),
}
for name, m in cases.items():
    with open(os.path.join(out, name + ".onnx"), "wb") as f:
        f.write(m.SerializeToString())
`

// TestSecurityONNXExternalDataOnlyFromTheManifest: ONNX Runtime opens a
// tensor's external data by the path the model names, relative to its
// directory, so a model naming ../../../etc/shadow or /proc/self/environ
// read a file of the validating control plane (or of a node) into its
// weights. The upload refuses every location that is not a file of the
// version's manifest, wherever in the model the tensor is.
func TestSecurityONNXExternalDataOnlyFromTheManifest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command("/usr/bin/python3", "-c", onnxExternal, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python3 onnx (run scripts/install-deps.sh test): %v\n%s", err, out)
	}
	model := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name+".onnx"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	weights := []byte("AAAAAAAAAAAAAAAA") // four float32s, which read as text
	ctx := context.Background()
	for _, tc := range []struct {
		model, want string
		external    []string
	}{
		{"inline", "", nil},
		{"manifest", "", []string{"weights.dat"}},
		{"dotdot", `onnx external data "../../../etc/shadow" is not a file of the manifest`, nil},
		{"absolute", `onnx external data "/proc/self/environ" is not a file of the manifest`, nil},
		{"unlisted", `onnx external data "other.dat" is not a file of the manifest`, nil},
		{"constant", `onnx external data "/etc/passwd" is not a file of the manifest`, nil},
		{"subgraph", `onnx external data "../secret.dat" is not a file of the manifest`, nil},
	} {
		t.Run(tc.model, func(t *testing.T) {
			files := map[string][]byte{"model/model.onnx": model(tc.model), "model/weights.dat": weights}
			up := NewUpload(newStore(t), manifestOf(files), Limits{})
			err := up.Add(ctx, "model/model.onnx", bytes.NewReader(files["model/model.onnx"]))
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Add: %v, want a refusal containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Add: %v", err)
			}
			if err := up.Add(ctx, "model/weights.dat", bytes.NewReader(weights)); err != nil {
				t.Fatalf("Add(weights.dat): %v", err)
			}
			res, err := up.Finish()
			if err != nil {
				t.Fatalf("Finish: %v", err)
			}
			if got := res.Files["model/model.onnx"]; got.Format != FormatONNX || !reflect.DeepEqual(got.External, tc.external) {
				t.Errorf("model blob = %+v, want onnx naming %v", got, tc.external)
			}
		})
	}
}
