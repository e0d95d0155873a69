package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// message is one turn of a chat, as the OpenAI chat API takes it.
type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func (a *app) chatCmd() *cobra.Command {
	var (
		text        string
		maxTokens   int
		temperature float64
	)
	cmd := &cobra.Command{
		Use:   "chat ENDPOINT [-m MESSAGE]",
		Short: "Chat with an LLM endpoint through the gateway, its answer streamed",
		Long: `chat sends a conversation to an LLM endpoint's chat completions route
through the inference gateway (--gateway, MP_GATEWAY or the context's
gateway) with the API key, and prints the answer as its tokens arrive.

With -m it sends that one message and exits. Without it, each line read
from stdin is your next turn and the conversation is kept: the endpoint
sees every earlier turn and answer. End with an empty input (Ctrl-D).`,
		Example: `  modelplane chat support-chat -m "where is my parcel?"
  modelplane chat support-chat`,
		Args: args("ENDPOINT"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			var history []message
			turn := func(content string) error {
				history = append(history, message{Role: "user", Content: content})
				answer, err := a.chatTurn(cmd, argv[0], history, maxTokens, temperature)
				if err != nil {
					return err
				}
				history = append(history, message{Role: "assistant", Content: answer})
				return nil
			}
			if text != "" {
				return turn(text)
			}
			in := bufio.NewScanner(a.env.Stdin)
			for in.Scan() {
				if line := strings.TrimSpace(in.Text()); line != "" {
					if err := turn(line); err != nil {
						return err
					}
				}
			}
			return in.Err()
		},
	}
	cmd.Flags().StringVarP(&text, "message", "m", "", "one message to send (without it: a turn per line of stdin)")
	cmd.Flags().IntVar(&maxTokens, "max-tokens", 0, "the most tokens an answer may have (0: the endpoint's default)")
	cmd.Flags().Float64Var(&temperature, "temperature", -1, "sampling temperature; 0 is greedy, the same answer every time (unset: the endpoint's default)")
	return cmd
}

// chatTurn streams one answer to history, printing its tokens as they
// come and a newline at its end, and returns its text.
func (a *app) chatTurn(cmd *cobra.Command, endpoint string, history []message, maxTokens int, temperature float64) (string, error) {
	req := map[string]any{"messages": history, "stream": true}
	if maxTokens > 0 {
		req["max_tokens"] = maxTokens
	}
	if temperature >= 0 {
		req["temperature"] = temperature
	}
	body, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	resp, err := a.gatewayPost(cmd, endpoint, "/chat/completions", body)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var answer strings.Builder
	events := bufio.NewScanner(resp.Body)
	events.Buffer(make([]byte, 64<<10), 1<<20)
	for events.Scan() {
		data, ok := strings.CutPrefix(events.Text(), "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return "", fmt.Errorf("chat: an event that is not JSON: %q", data)
		}
		if chunk.Error != nil {
			return "", fmt.Errorf("chat: the stream ended with an error: %s", chunk.Error.Message)
		}
		for _, c := range chunk.Choices {
			answer.WriteString(c.Delta.Content)
			if _, err := io.WriteString(a.env.Stdout, c.Delta.Content); err != nil {
				return "", err
			}
		}
	}
	if err := events.Err(); err != nil {
		return "", fmt.Errorf("chat: the stream broke: %w", err)
	}
	_, err = fmt.Fprintln(a.env.Stdout)
	return answer.String(), err
}
