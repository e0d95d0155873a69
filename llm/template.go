package llm

import "strings"

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
	switch t {
	case Llama3:
		b.WriteString(bos)
		for _, m := range msgs {
			b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + strings.TrimSpace(m.Content) + "<|eot_id|>")
		}
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	case Llama2:
		sys := ""
		first := true
		for _, m := range msgs {
			switch m.Role {
			case "system":
				sys = "<<SYS>>\n" + m.Content + "\n<</SYS>>\n\n"
			case "user":
				c := m.Content
				if first {
					c = sys + c
					first = false
				}
				b.WriteString(bos + "[INST] " + strings.TrimSpace(c) + " [/INST]")
			case "assistant":
				b.WriteString(" " + strings.TrimSpace(m.Content) + " " + eos)
			}
		}
	case Zephyr:
		for _, m := range msgs {
			b.WriteString("<|" + m.Role + "|>\n" + m.Content + eos + "\n")
		}
		b.WriteString("<|assistant|>\n")
	default:
		for _, m := range msgs {
			b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
		}
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String()
}

// Chat renders messages with the model's chat template and the stop texts
// that end the assistant's turn in that format. Encode the prompt with
// special set, so the format's markers become their control tokens.
func (m *Model) Chat(msgs []Message) (prompt string, stops []string) {
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
	return RenderChat(t, msgs, bos, eos), stops
}
