// Package artifact owns model artifacts: the content-addressed blob store
// (files kept under their sha256), the manifest that lists a version's files
// with their digests, and the inspection that decides which uploaded files are
// accepted at all.
//
// Only safetensors, ONNX, GGUF, JSON (configs, tokenizers, XGBoost JSON
// models) and plain UTF-8 text (configs, vocabularies, LightGBM text models)
// are accepted, and each is recognised by its content, never by its name
// alone. Everything else is refused, pickle in any disguise first of all: raw
// pickle, PyTorch zip checkpoints, joblib files and compressed or archived
// pickles, because loading one runs arbitrary code. Text files, and the
// accepted binary formats, also go through a scan of pickle opcodes that
// fails closed: a file passes only when CPython's unpickler would make no
// call on it, and text that loads as a whole pickle is refused too. Where
// the scan cannot tell, it refuses. A file name only ever makes the check
// stricter (a .json file must be valid JSON, a .safetensors file must be
// safetensors, a .bin or .pt file may not be text). Tar archives
// of a whole version are accepted by Upload.AddTar and CheckTar only when no
// entry escapes the archive or is a link or device.
//
// Refusals caused by the upload are *Rejection errors that wrap ErrRejected
// or ErrTooLarge, with lower-case messages that name the file, so the HTTP
// layer can show them as they are.
//
// The package must not import anything from modelplane: it knows nothing of
// teams, versions or the database, and registering a version after a
// successful Upload.Finish is the caller's job, as is ending the upload:
// Release once the version is recorded, Discard when it will not be, which
// removes the blobs the upload wrote unless another upload holds them or
// the caller's InUse says a version references them.
package artifact
