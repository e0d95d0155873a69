package serveapi

// The V2 (Open Inference protocol) datatypes a tensor model's inputs and
// outputs have, as Triton names ONNX's element types.
const (
	TypeBool   = "BOOL"
	TypeUint8  = "UINT8"
	TypeUint16 = "UINT16"
	TypeUint32 = "UINT32"
	TypeUint64 = "UINT64"
	TypeInt8   = "INT8"
	TypeInt16  = "INT16"
	TypeInt32  = "INT32"
	TypeInt64  = "INT64"
	TypeFP16   = "FP16"
	TypeFP32   = "FP32"
	TypeFP64   = "FP64"
	TypeBF16   = "BF16"
	TypeBytes  = "BYTES"
)

// ElementSize is the bytes one element of a V2 datatype takes in
// Tensor.Data (BOOL one), 0 for BYTES and unknown datatypes.
func ElementSize(datatype string) int {
	switch datatype {
	case TypeBool, TypeUint8, TypeInt8:
		return 1
	case TypeUint16, TypeInt16, TypeFP16, TypeBF16:
		return 2
	case TypeUint32, TypeInt32, TypeFP32:
		return 4
	case TypeUint64, TypeInt64, TypeFP64:
		return 8
	}
	return 0
}

// TensorSpec is one input or output of a tensor model as the model
// declares it: a dimension of -1 is dynamic (any size).
type TensorSpec struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// Tensor is one tensor's values. Data holds the elements row-major and
// little-endian, ElementSize(Datatype) bytes each; a BYTES tensor holds
// Strings instead.
type Tensor struct {
	Name     string
	Datatype string
	Shape    []int64
	Data     []byte
	Strings  []string
}

// TensorModel is a loaded model served with its own named, typed tensors
// (an ONNX graph's inputs and outputs, the tokenizer's text and ids)
// rather than rows of features. Run is called by one goroutine at a time.
type TensorModel interface {
	// Inputs and Outputs are the model's signature, in the order Run
	// takes and returns them.
	Inputs() []TensorSpec
	Outputs() []TensorSpec
	// Run computes every output from one tensor per input, in Inputs'
	// order, whose datatypes and shapes fit the signature (the caller
	// checks); its error names the input at fault, never its values.
	Run(inputs []Tensor) ([]Tensor, error)
	// Close releases what Load took.
	Close() error
}

// BatchAxis models say whether rows along their first axis are
// independent: a TensorModel whose inputs and outputs all have a dynamic
// first axis is batched along it unless it implements BatchAxis and
// answers false (a tokenizer, say, pads every row to the longest of the
// batch, so another request's text would change a row's answer).
type BatchAxis interface {
	BatchesFirstAxis() bool
}

// Padding models declare inputs whose rows may be padded at the end of
// their one inner axis ([batch, sequence]) with the given value, so that
// rows of different lengths batch together: token ids and their mask, say.
// The runtime pads only when every output's rows have a fixed shape, which
// padding cannot change.
type Padding interface {
	PadValues() map[string]float64
}
