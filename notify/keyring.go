package notify

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrNoKey means no server key is configured, so no secret can be sealed.
var ErrNoKey = errors.New("no server key: set MP_SECRET_KEY")

// Keyring holds the server keys that seal webhook secrets: the first seals,
// every one opens, so that a rotated key keeps opening what it sealed
// until ResealAll moved everything to the new one.
type Keyring struct {
	keys []key
}

type key struct {
	id   string
	aead cipher.AEAD
}

// ParseKeyring reads MP_SECRET_KEY: comma-separated keys, each 32 bytes in
// standard base64, the current one first. An empty value is a keyring with
// no key (Seal fails with ErrNoKey).
func ParseKeyring(s string) (*Keyring, error) {
	k := &Keyring{}
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(part)
		if err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("MP_SECRET_KEY: key %d is not 32 bytes of base64", i+1)
		}
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(raw)
		k.keys = append(k.keys, key{id: hex.EncodeToString(sum[:6]), aead: aead})
	}
	return k, nil
}

// NewKey returns a new random key in MP_SECRET_KEY's form.
func NewKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// CurrentID names the key Seal uses; empty without a key.
func (k *Keyring) CurrentID() string {
	if k == nil || len(k.keys) == 0 {
		return ""
	}
	return k.keys[0].id
}

// Seal encrypts secret with the current key (AES-256-GCM, the nonce
// first) and returns it with the key's id.
func (k *Keyring) Seal(secret []byte) (sealed []byte, keyID string, err error) {
	if k == nil || len(k.keys) == 0 {
		return nil, "", ErrNoKey
	}
	cur := k.keys[0]
	nonce := make([]byte, cur.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, "", err
	}
	return cur.aead.Seal(nonce, nonce, secret, []byte(cur.id)), cur.id, nil
}

// Open decrypts what the key named keyID sealed.
func (k *Keyring) Open(sealed []byte, keyID string) ([]byte, error) {
	if k != nil {
		for _, c := range k.keys {
			if c.id != keyID {
				continue
			}
			n := c.aead.NonceSize()
			if len(sealed) < n {
				return nil, errors.New("sealed secret too short")
			}
			return c.aead.Open(nil, sealed[:n], sealed[n:], []byte(c.id))
		}
	}
	return nil, fmt.Errorf("no server key %s in MP_SECRET_KEY: it was sealed with a key since removed", keyID)
}
