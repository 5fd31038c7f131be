// Package jupyter launches Jupyter kernels from their kernelspecs and speaks
// the Jupyter messaging protocol (v5) to them over ZeroMQ.
//
// It deliberately knows nothing about HTTP or the E2B wire format: it hands
// out the raw kernel messages addressed to one request, and the code
// interpreter maps them to what its clients expect.
package jupyter

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// protocolVersion is the messaging protocol version stamped on every request.
const protocolVersion = "5.3"

// delimiter separates routing identities from the signed message frames.
var delimiter = []byte("<IDS|MSG>")

// Header is a Jupyter message header.
type Header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// Message is one Jupyter message. Content stays raw so each consumer decodes
// only the message types it cares about.
type Message struct {
	Header       Header
	ParentHeader Header
	Metadata     json.RawMessage
	Content      json.RawMessage
	Buffers      [][]byte
}

// ParentID returns the msg_id of the request this message answers.
func (m *Message) ParentID() string { return m.ParentHeader.MsgID }

// Type returns the message type, e.g. "stream" or "execute_reply".
func (m *Message) Type() string { return m.Header.MsgType }

// Decode unmarshals the message content into v.
func (m *Message) Decode(v any) error {
	if err := json.Unmarshal(m.Content, v); err != nil {
		return fmt.Errorf("decode %s content: %w", m.Header.MsgType, err)
	}
	return nil
}

// signer signs and verifies messages with the connection file's key. An
// empty key disables signing, as the protocol allows.
type signer struct {
	key []byte
}

func (s signer) sign(parts ...[]byte) []byte {
	if len(s.key) == 0 {
		return nil
	}
	mac := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		mac.Write(p)
	}
	sum := mac.Sum(nil)
	out := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(out, sum)
	return out
}

// encode turns a message into wire frames (delimiter first: we only speak
// from DEALER sockets, which add no identity of their own).
func (s signer) encode(m *Message) ([][]byte, error) {
	header, err := json.Marshal(m.Header)
	if err != nil {
		return nil, err
	}
	parent := []byte("{}")
	if m.ParentHeader.MsgID != "" {
		if parent, err = json.Marshal(m.ParentHeader); err != nil {
			return nil, err
		}
	}
	meta := []byte(m.Metadata)
	if len(meta) == 0 {
		meta = []byte("{}")
	}
	content := []byte(m.Content)
	if len(content) == 0 {
		content = []byte("{}")
	}
	frames := [][]byte{delimiter, s.sign(header, parent, meta, content), header, parent, meta, content}
	frames = append(frames, m.Buffers...)
	return frames, nil
}

var errBadSignature = errors.New("message signature does not match")

// decode parses wire frames, skipping any routing prefix (topics on iopub).
func (s signer) decode(frames [][]byte) (*Message, error) {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], delimiter) {
		i++
	}
	if len(frames)-i < 6 {
		return nil, fmt.Errorf("malformed message: %d frames, delimiter at %d", len(frames), i)
	}
	sig, header, parent, meta, content := frames[i+1], frames[i+2], frames[i+3], frames[i+4], frames[i+5]
	if len(s.key) > 0 && !hmac.Equal(sig, s.sign(header, parent, meta, content)) {
		return nil, errBadSignature
	}
	m := &Message{Metadata: meta, Content: content, Buffers: frames[i+6:]}
	if err := json.Unmarshal(header, &m.Header); err != nil {
		return nil, fmt.Errorf("decode header: %w", err)
	}
	if len(parent) > 2 {
		if err := json.Unmarshal(parent, &m.ParentHeader); err != nil {
			return nil, fmt.Errorf("decode parent header: %w", err)
		}
	}
	return m, nil
}

// NewID returns a random identifier in UUID form, which is what kernels and
// frontends expect for msg_id and session.
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func nowISO() string {
	return time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00")
}
