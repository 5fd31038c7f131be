// Command pages is the memory workload of the runtime tests. As PID 1
// (`pages serve MIB`) it fills MIB MiB of private anonymous memory with a
// pattern that each page derives from its index and a version, and then
// answers commands from `pages CMD` over a Unix socket:
//
//	verify         check every page byte for byte
//	write STRIDE   give every STRIDE-th page a new version, then verify
//	fork           fork; the child verifies, rewrites every page of its
//	               own copy and verifies again; then the parent verifies
//
// Each answer is one line: "ok PAGES" or "bad N of PAGES ...". A restored
// sandbox that answers "ok" carries exactly the memory it was saved with,
// whatever mix of shared and private pages backs it.
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

const (
	sock = "/tmp/pages.sock"
	page = 4096
)

// fillPage writes the pattern of page i at version v into p.
func fillPage(p []byte, i int, v uint32) {
	x := uint64(i)<<32 ^ uint64(v) ^ 0x9E3779B97F4A7C15
	for k := 0; k+8 <= len(p); k += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		for b := 0; b < 8; b++ {
			p[k+b] = byte(x >> (8 * b))
		}
	}
}

// memory is the filled region and each page's version. Nothing here
// allocates after setup, so the forked child can run it.
type memory struct {
	b    []byte
	vers []uint32
	want []byte
}

func (m *memory) pages() int { return len(m.b) / page }

func (m *memory) write(stride int, add uint32) {
	for i := 0; i < m.pages(); i += stride {
		m.vers[i] += add
		fillPage(m.b[i*page:(i+1)*page], i, m.vers[i])
	}
}

// verify returns the number of pages whose bytes differ from their
// pattern, and the first of them (-1 when none).
func (m *memory) verify() (bad, first int) {
	first = -1
	for i := 0; i < m.pages(); i++ {
		fillPage(m.want, i, m.vers[i])
		got := m.b[i*page : (i+1)*page]
		for k := range got {
			if got[k] != m.want[k] {
				if first < 0 {
					first = i
				}
				bad++
				break
			}
		}
	}
	return bad, first
}

func (m *memory) answer() string {
	if bad, first := m.verify(); bad > 0 {
		return fmt.Sprintf("bad %d of %d, first %d", bad, m.pages(), first)
	}
	return fmt.Sprintf("ok %d", m.pages())
}

func (m *memory) fork() string {
	pid, _, errno := syscall.RawSyscall(syscall.SYS_FORK, 0, 0, 0)
	if errno != 0 {
		return "fork: " + errno.Error()
	}
	if pid == 0 {
		bad, _ := m.verify()
		m.write(1, 1000)
		again, _ := m.verify()
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, uintptr(min(bad+again, 255)), 0, 0)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(int(pid), &ws, 0, nil); err != nil {
		return "wait: " + err.Error()
	}
	if ws.ExitStatus() != 0 {
		return fmt.Sprintf("bad child: %d pages", ws.ExitStatus())
	}
	return m.answer()
}

func serve(mib int) {
	b, err := syscall.Mmap(-1, 0, mib<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	m := &memory{b: b, vers: make([]uint32, len(b)/page), want: make([]byte, page)}
	m.write(1, 1)
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			continue
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		f := strings.Fields(line)
		var out string
		switch {
		case len(f) == 1 && f[0] == "verify":
			out = m.answer()
		case len(f) == 2 && f[0] == "write":
			stride, err := strconv.Atoi(f[1])
			if err != nil || stride < 1 {
				out = "bad stride " + f[1]
				break
			}
			m.write(stride, 1)
			out = m.answer()
		case len(f) == 1 && f[0] == "fork":
			out = m.fork()
		default:
			out = fmt.Sprintf("unknown command %q", line)
		}
		io.WriteString(c, out+"\n")
		c.Close()
	}
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "serve" {
		mib, err := strconv.Atoi(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		serve(mib)
		return
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	io.WriteString(c, strings.Join(os.Args[1:], " ")+"\n")
	io.Copy(os.Stdout, c)
}
