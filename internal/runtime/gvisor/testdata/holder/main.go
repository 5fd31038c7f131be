// Command holder is the workload of the runtime tests: as PID 1 of a
// sandbox it keeps a random token in memory and hands it out over a Unix
// socket and TCP port 8080, so a test can tell whether a restored sandbox
// carries the memory of the one it was checkpointed from.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"time"
)

const sock = "/tmp/holder.sock"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "get" {
		c, err := net.Dial("unix", sock)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		io.Copy(os.Stdout, c)
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "write" {
		if err := os.WriteFile(os.Args[2], []byte(os.Args[3]), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 4 && os.Args[1] == "flood" {
		// flood PATH MIB LINE: write LINE over and over to PATH (PID 1's
		// console is /proc/1/fd/1) until MIB MiB are out (once for 0),
		// then "flood end".
		f, err := os.OpenFile(os.Args[2], os.O_WRONLY, 0)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		var mb int
		fmt.Sscan(os.Args[3], &mb)
		line := []byte(os.Args[4] + "\n")
		chunk := line
		if mb > 0 {
			chunk = bytes.Repeat(line, 1<<20/len(line)+1)
		}
		for written := 0; written == 0 || written < mb<<20; written += len(chunk) {
			if _, err := f.Write(chunk); err != nil {
				fmt.Println(err)
				os.Exit(3)
			}
		}
		if _, err := f.WriteString("flood end\n"); err != nil {
			fmt.Println(err)
			os.Exit(3)
		}
		fmt.Println("flooded")
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "fill" {
		// Write until the disk is full; report the error.
		f, err := os.Create(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		buf := make([]byte, 1<<20)
		for {
			if _, err := f.Write(buf); err != nil {
				fmt.Println(err)
				os.Exit(3)
			}
		}
	}
	if len(os.Args) > 2 && os.Args[1] == "dial" {
		c, err := net.DialTimeout("tcp", os.Args[2], 2*time.Second)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		c.Close()
		fmt.Println("connected")
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "cat" {
		b, err := os.ReadFile(os.Args[2])
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		os.Stdout.Write(b)
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "rm" {
		if err := os.Remove(os.Args[2]); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "ls" {
		entries, err := os.ReadDir(os.Args[2])
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		for _, e := range entries {
			fmt.Println(e.Name())
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "sleep" {
		time.Sleep(time.Hour)
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "forkbomb" {
		// Start sleeping copies of itself until the sandbox refuses, and
		// report how far it got.
		n := 0
		var last error
		for i := 0; i < 100000; i++ {
			cmd := exec.Command(os.Args[0], "sleep")
			if last = cmd.Start(); last != nil {
				break
			}
			n++
		}
		fmt.Println("started", n, "stopped by", last)
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "alloc" {
		// Allocate N MiB in one piece, as a program asking for a huge
		// buffer does, touch it, then report.
		var mb int
		fmt.Sscan(os.Args[2], &mb)
		buf := make([]byte, mb<<20)
		for j := 0; j < len(buf); j += 4096 {
			buf[j] = 1
		}
		fmt.Println("allocated", len(buf)>>20)
		return
	}
	b := make([]byte, 16)
	rand.Read(b)
	token := hex.EncodeToString(b)
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			io.WriteString(c, token)
			c.Close()
		}
	}()
	http.ListenAndServe(":8080", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, token)
	}))
	select {}
}
