package llm

import (
	"strings"
	"unicode"
)

// Message is one chat turn.
type Message struct {
	Role    string // "system", "user" or "assistant"
	Content string
}

// Template is a chat format recognised from tokenizer.chat_template.
type Template string

// The chat formats RenderChat writes. A template that is none of the
// first four renders as ChatML.
const (
	ChatML  Template = "chatml" // <|im_start|>role\n…<|im_end|>\n
	Llama2  Template = "llama2" // <s>[INST] <<SYS>>\n…\n<</SYS>>\n\n… [/INST] … </s>
	Llama3  Template = "llama3" // <|start_header_id|>role<|end_header_id|>\n\n…<|eot_id|>
	Zephyr  Template = "zephyr" // <|role|>\n…</s>\n
	Unknown Template = "chatml (fallback)"
)

// RecogniseTemplate names the chat format of a Jinja chat template by the
// markers it writes; the template is not executed.
func RecogniseTemplate(jinja string) Template {
	switch {
	case strings.Contains(jinja, "<|im_start|>"):
		return ChatML
	case strings.Contains(jinja, "<|start_header_id|>"):
		return Llama3
	case strings.Contains(jinja, "[INST]"):
		return Llama2
	case strings.Contains(jinja, "<|user|>") || strings.Contains(jinja, "<|assistant|>"):
		return Zephyr
	}
	return Unknown
}

// RenderChat writes messages in the format, ending with the opening of the
// assistant's turn, as the template's add_generation_prompt would. bos and
// eos are the tokenizer's texts for them (Llama-2 and Zephyr write them).
func RenderChat(t Template, msgs []Message, bos, eos string) string {
	var b strings.Builder
	for _, s := range ChatSegments(t, msgs, bos, eos) {
		b.WriteString(s.Text)
	}
	return b.String()
}

// ChatSegments is RenderChat's text in segments: what the format writes
// (markers, roles, BOS and EOS) is Special, the messages' content is not,
// so that a control token spelt in a message is encoded as text
// (Tokenizer.EncodeSegments). A role is the caller's too: one that is not
// a plain word is written as text.
func ChatSegments(t Template, msgs []Message, bos, eos string) []Segment {
	var segs []Segment
	mark := func(s string) {
		if s != "" {
			segs = append(segs, Segment{Text: s, Special: true})
		}
	}
	text := func(s string) {
		if s != "" {
			segs = append(segs, Segment{Text: s})
		}
	}
	switch t {
	case Llama3:
		mark(bos)
		for _, m := range msgs {
			mark("<|start_header_id|>")
			text(m.Role)
			mark("<|end_header_id|>\n\n")
			text(strings.TrimSpace(m.Content))
			mark("<|eot_id|>")
		}
		mark("<|start_header_id|>assistant<|end_header_id|>\n\n")
	case Llama2:
		var sys []Segment
		first := true
		for _, m := range msgs {
			switch m.Role {
			case "system":
				sys = []Segment{{Text: "<<SYS>>\n", Special: true}, {Text: m.Content}, {Text: "\n<</SYS>>\n\n", Special: true}}
			case "user":
				mark(bos + "[INST] ")
				c := strings.TrimSpace(m.Content)
				if first {
					first = false
					if sys != nil {
						// TrimSpace of system block + content: the block
						// starts with a marker, so only the right is cut.
						c = strings.TrimRightFunc(m.Content, unicode.IsSpace)
						if c == "" {
							sys[2].Text = "\n<</SYS>>"
						}
						for _, s := range sys {
							if s.Text != "" {
								segs = append(segs, s)
							}
						}
					}
				}
				text(c)
				mark(" [/INST]")
			case "assistant":
				mark(" ")
				text(strings.TrimSpace(m.Content))
				mark(" " + eos)
			}
		}
	case Zephyr:
		for _, m := range msgs {
			mark("<|")
			text(m.Role)
			mark("|>\n")
			text(m.Content)
			mark(eos + "\n")
		}
		mark("<|assistant|>\n")
	default:
		for _, m := range msgs {
			mark("<|im_start|>")
			text(m.Role)
			mark("\n")
			text(m.Content)
			mark("<|im_end|>\n")
		}
		mark("<|im_start|>assistant\n")
	}
	return segs
}

// Chat renders messages with the model's chat template and the stop texts
// that end the assistant's turn in that format. Encode the prompt with
// special set, so the format's markers become their control tokens; or
// encode ChatSegments' segments, so that only they do.
func (m *Model) Chat(msgs []Message) (prompt string, stops []string) {
	segs, stops := m.ChatSegments(msgs)
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.Text)
	}
	return b.String(), stops
}

// ChatSegments is Chat's prompt as segments for Tokenizer.EncodeSegments:
// the format's markers are Special, the messages' content and roles are
// text, so a user who writes "<|im_end|>" cannot end their turn with it.
func (m *Model) ChatSegments(msgs []Message) (segs []Segment, stops []string) {
	t := RecogniseTemplate(m.template)
	bos, eos := m.tok.Token(m.tok.BOS), m.tok.Token(m.tok.EOS)
	if m.tok.AddsBOS() {
		bos = "" // Encode puts it first; writing it too would double it
	}
	switch t {
	case Llama3:
		stops = []string{"<|eot_id|>"}
	case Llama2, Zephyr:
		stops = []string{eos}
	default:
		stops = []string{"<|im_end|>"}
	}
	return ChatSegments(t, msgs, bos, eos), stops
}
