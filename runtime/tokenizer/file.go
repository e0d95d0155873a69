package tokenizer

import "encoding/json"

// file is the part of tokenizer.json this package reads.
type file struct {
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         json.RawMessage `json:"model"`
	Truncation    *truncation     `json:"truncation"`
	Padding       *padding        `json:"padding"`
}

type addedToken struct {
	ID         int64  `json:"id"`
	Content    string `json:"content"`
	Special    bool   `json:"special"`
	Normalized bool   `json:"normalized"`
}

type truncation struct {
	MaxLength int    `json:"max_length"`
	Direction string `json:"direction"`
}

type padding struct {
	Strategy  json.RawMessage `json:"strategy"`
	Direction string          `json:"direction"`
	PadID     int64           `json:"pad_id"`
	PadTypeID int64           `json:"pad_type_id"`
}
