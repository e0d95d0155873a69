// Package docproc builds the models of the demo's document-processor
// pipeline (seed 001 §9): a WordPiece tokenizer (tokenizer.json, served by
// the built-in tokenizer runtime), a small BERT-style ONNX embedder (token
// embedding lookup and masked mean pooling over input_ids and
// attention_mask, int64 [batch, seq]) and an ONNX classifier over the
// embedding that is trained on labelled sentences, so that the label it
// gives a document (invoice, contract, support ticket, job application)
// makes sense to a person. The formatting step is the graph's.
//
// Everything is written by the project's own code (runtime/tokenizer's
// Train, runtime/onnx/onnxgen) from a seed, the same bytes every time. It
// only builds files and their serving configurations: registering them,
// and wiring the graph, is the demo loader's.
package docproc
