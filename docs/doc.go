// Package docs carries the repository's documentation, docs/*.md, into the
// binary: the text the demo LLM (chat-cpu) is trained on when dev first
// needs it (llm.TrainBigram). It holds files only, no code that reads
// them.
package docs

import "embed"

// Markdown is docs/*.md.
//
//go:embed *.md
var Markdown embed.FS
