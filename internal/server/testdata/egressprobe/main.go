// Command egressprobe runs inside a sandbox in the egress rules tests.
//
//	egressprobe get URL IP [EXTRA-CA]   request URL with its host dialled at IP
//	                                    (curl --resolve); TLS trusts the system
//	                                    roots (SSL_CERT_FILE) and EXTRA-CA
//	egressprobe scan HEX                look for the bytes HEX stands for in
//	                                    every process's environment, command
//	                                    line and memory and in every file
//
// scan takes the needle hex-encoded so its own command line does not hold
// it; it skips its own process, which decodes it, but reports whether its
// own memory and environment hold it (they show the scan can see).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: egressprobe get URL IP [CA] | scan HEX")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "get":
		get(os.Args[2], os.Args[3], os.Args[4:])
	case "scan":
		needle, err := hex.DecodeString(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		scan(needle)
	}
}

func get(url, ip string, extra []string) {
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	for _, f := range extra {
		pem, err := os.ReadFile(f)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		roots.AppendCertsFromPEM(pem)
	}
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			var d net.Dialer
			return d.DialContext(ctx, "tcp4", net.JoinHostPort(ip, port))
		},
	}
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer made-in-the-sandbox")
	resp, err := c.Do(req)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	issuer := "-"
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		issuer = strings.ReplaceAll(resp.TLS.PeerCertificates[0].Issuer.CommonName, " ", "_")
	}
	fmt.Printf("status %d issuer %s body %s\n", resp.StatusCode, issuer, strings.TrimSpace(string(body)))
}

func scan(needle []byte) {
	self := os.Getpid()
	var found []string
	files, procs := 0, 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		procs++
		for _, f := range []string{"environ", "cmdline"} {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f)); bytes.Contains(b, needle) {
				found = append(found, fmt.Sprintf("/proc/%d/%s", pid, f))
			}
		}
		if where := scanMemory(pid, needle); where != "" {
			found = append(found, where)
		}
	}
	filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (p == "/proc" || p == "/sys" || p == "/dev") {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		files++
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, needle) {
			found = append(found, p)
		}
		return nil
	})
	// Self-checks, so a clean result means something: this process holds
	// the needle in memory (decoded above), and its environment is
	// readable like the others'.
	selfEnv, _ := os.ReadFile("/proc/self/environ")
	checks := fmt.Sprintf("self-mem=%v self-environ=%v", scanMemory(self, needle) != "", bytes.Contains(selfEnv, needle))
	if len(found) > 0 {
		fmt.Printf("FOUND %s %s\n", strings.Join(found, " "), checks)
		return
	}
	fmt.Printf("CLEAN files %d processes %d %s\n", files, procs, checks)
}

// scanMemory reads every readable mapping of pid through /proc/pid/mem.
func scanMemory(pid int, needle []byte) string {
	maps, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return ""
	}
	defer maps.Close()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return ""
	}
	defer mem.Close()
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !strings.HasPrefix(f[1], "r") {
			continue
		}
		var lo, hi uint64
		if _, err := fmt.Sscanf(f[0], "%x-%x", &lo, &hi); err != nil || hi-lo > 1<<30 {
			continue
		}
		buf := make([]byte, hi-lo)
		n, _ := mem.ReadAt(buf, int64(lo))
		if bytes.Contains(buf[:n], needle) {
			return fmt.Sprintf("/proc/%d/mem@%x", pid, lo)
		}
	}
	return ""
}
