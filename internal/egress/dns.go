package egress

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// maxDNSMessage is the largest DNS message handled (TCP's limit).
const maxDNSMessage = 65535

func (s *slotFilter) serveDNSUDP() {
	defer s.wg.Done()
	buf := make([]byte, maxDNSMessage)
	for {
		n, from, err := s.dnsUDP.ReadFrom(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("egress dns read", "err", err)
			}
			return
		}
		select {
		case s.dnsSem <- struct{}{}:
		default:
			continue // too many at once; the client retries
		}
		q := bytes.Clone(buf[:n])
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.dnsSem }()
			if resp := s.answer(q, "udp"); resp != nil {
				s.dnsUDP.WriteTo(resp, from)
			}
		}()
	}
}

func (s *slotFilter) serveDNSTCP() {
	defer s.wg.Done()
	for {
		c, err := s.dnsTCP.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("egress dns accept", "err", err)
			}
			return
		}
		select {
		case s.dnsSem <- struct{}{}:
		default:
			c.Close()
			continue
		}
		p := &proxied{client: c}
		if !s.track(p) {
			c.Close()
			<-s.dnsSem
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.dnsSem }()
			defer s.untrack(p)
			defer p.close()
			br := bufio.NewReader(c)
			for {
				c.SetDeadline(time.Now().Add(peekTimeout))
				q, err := readTCPMessage(br)
				if err != nil {
					return
				}
				resp := s.answer(q, "tcp")
				if resp == nil {
					return
				}
				if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(resp)))); err != nil {
					return
				}
				if _, err := c.Write(resp); err != nil {
					return
				}
			}
		}()
	}
}

func readTCPMessage(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// answer judges one query by its name: a denied name does not exist, and
// neither does any name an allow entry does not cover when the policy
// denies everything not allowed. Only the remaining names are asked
// upstream: a query is data leaving the sandbox (a name such as
// <secret>.attacker.example reaches that domain's servers through any
// resolver), so a sandbox without internet access must not get names it
// may not use resolved, whatever addresses they would have. nil means no
// answer.
func (s *slotFilter) answer(q []byte, network string) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	question, err := p.Question()
	if err != nil {
		return reply(h, nil, dnsmessage.RCodeFormatError)
	}
	// The query goes upstream as sent, so it must hold nothing but the
	// name judged here: a second question, or answer and authority
	// records, would carry names no rule looked at.
	if !onlyQuestion(&p) {
		return reply(h, &question, dnsmessage.RCodeFormatError)
	}
	r := s.rules.Load()
	name := strings.TrimSuffix(strings.ToLower(question.Name.String()), ".")
	if v := r.nameVerdict(name); v == denied || v == undecided && r.denyAll() {
		s.log.Debug("egress dns denied", "name", name)
		return reply(h, &question, dnsmessage.RCodeNameError)
	}
	resp, err := s.f.forward(q, network)
	if err != nil {
		s.log.Debug("egress dns upstream", "name", name, "err", err)
		return reply(h, &question, dnsmessage.RCodeServerFailure)
	}
	return resp
}

// onlyQuestion reports whether the rest of a query, after its first
// question, has no other question and no answer or authority records (the
// additional section may carry EDNS options).
func onlyQuestion(p *dnsmessage.Parser) bool {
	if _, err := p.Question(); err != dnsmessage.ErrSectionDone {
		return false
	}
	if _, err := p.AnswerHeader(); err != dnsmessage.ErrSectionDone {
		return false
	}
	if _, err := p.AuthorityHeader(); err != dnsmessage.ErrSectionDone {
		return false
	}
	return true
}

// reply builds an answer without records.
func reply(q dnsmessage.Header, question *dnsmessage.Question, rcode dnsmessage.RCode) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: q.ID, Response: true, OpCode: q.OpCode,
		RecursionDesired: q.RecursionDesired, RecursionAvailable: true, RCode: rcode,
	})
	if question != nil {
		b.StartQuestions()
		b.Question(*question)
	}
	msg, err := b.Finish()
	if err != nil {
		return nil
	}
	return msg
}

// forward asks Config.Resolver, over the transport the sandbox used.
func (f *Filter) forward(q []byte, network string) ([]byte, error) {
	if !f.cfg.Resolver.IsValid() {
		return nil, errors.New("no resolver configured")
	}
	c, err := net.DialTimeout(network, f.cfg.Resolver.String(), resolveTimeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(resolveTimeout))
	if network == "tcp" {
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)); err != nil {
			return nil, err
		}
		return readTCPMessage(c)
	}
	if _, err := c.Write(q); err != nil {
		return nil, err
	}
	buf := make([]byte, maxDNSMessage)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		// Skip stray datagrams: the answer carries the query's ID.
		if n >= 2 && bytes.Equal(buf[:2], q[:2]) {
			return buf[:n], nil
		}
	}
}

// resolvConfs are read in order to find the host's resolver; a loopback
// one (systemd-resolved's stub) is skipped for resolved's upstream list,
// as netslot does for the slots' own DNS.
var resolvConfs = []string{"/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"}

func hostResolver() netip.AddrPort {
	for _, f := range resolvConfs {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 2 || fields[0] != "nameserver" {
				continue
			}
			a, err := netip.ParseAddr(fields[1])
			if err == nil && a.Is4() && !a.IsLoopback() && !a.IsUnspecified() {
				return netip.AddrPortFrom(a, 53)
			}
		}
	}
	return netip.AddrPort{}
}
