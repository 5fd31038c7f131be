// The kernel's sockets: a reader per channel that sorts messages into
// inboxes by the request they answer, and signed sends.

package jupyter

import (
	"encoding/json"
	"errors"
	"io"

	"github.com/go-zeromq/zmq4"
)

// received is a message tagged with the channel it came from.
type received struct {
	*Message
	channel string
}

// read dispatches one socket's messages to the request they answer. It
// ends when the socket does: after the kernel dies Recv returns EOF.
func (k *Kernel) read(channel string, s zmq4.Socket) {
	for {
		zm, err := s.Recv()
		if err != nil {
			if k.sockCtx.Err() == nil && !errors.Is(err, io.EOF) {
				k.log.Debug("receive failed", "channel", channel, "err", err)
			}
			return
		}
		m, err := k.sign.decode(zm.Frames)
		if err != nil {
			k.log.Warn("dropping kernel message", "channel", channel, "err", err)
			continue
		}
		if channel == "stdin" && m.Type() == "input_request" {
			// We never allow stdin; a kernel that asks anyway gets an
			// empty line rather than blocking the execution forever.
			k.sendReply(k.stdin, m, "input_reply", map[string]string{"value": ""})
			continue
		}
		k.mu.Lock()
		in := k.inboxes[m.ParentID()]
		k.mu.Unlock()
		if in != nil {
			in.put(received{m, channel})
		}
	}
}

func (k *Kernel) request() (string, *inbox) {
	id := NewID()
	in := newInbox()
	k.mu.Lock()
	k.inboxes[id] = in
	k.mu.Unlock()
	select {
	case <-k.done:
		in.close()
	default:
	}
	return id, in
}

func (k *Kernel) drop(id string) {
	k.mu.Lock()
	delete(k.inboxes, id)
	k.mu.Unlock()
}

func (k *Kernel) send(s zmq4.Socket, id, msgType string, content any) error {
	c, err := json.Marshal(content)
	if err != nil {
		return err
	}
	m := &Message{
		Header:  Header{MsgID: id, Session: k.session, Username: "cube", Date: nowISO(), MsgType: msgType, Version: protocolVersion},
		Content: c,
	}
	return k.sendMsg(s, m)
}

func (k *Kernel) sendReply(s zmq4.Socket, parent *Message, msgType string, content any) {
	c, _ := json.Marshal(content)
	m := &Message{
		Header:       Header{MsgID: NewID(), Session: k.session, Username: "cube", Date: nowISO(), MsgType: msgType, Version: protocolVersion},
		ParentHeader: parent.Header,
		Content:      c,
	}
	if err := k.sendMsg(s, m); err != nil {
		k.log.Debug("send reply failed", "type", msgType, "err", err)
	}
}

func (k *Kernel) sendMsg(s zmq4.Socket, m *Message) error {
	frames, err := k.sign.encode(m)
	if err != nil {
		return err
	}
	select {
	case <-k.done:
		return ErrDied
	default:
	}
	k.sendMu.Lock()
	defer k.sendMu.Unlock()
	return s.SendMulti(zmq4.NewMsgFrom(frames...))
}
