package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"cube/internal/api/wire"
	"cube/internal/envd/protocol"
)

// CodePort is the port of the code interpreter inside every sandbox.
const CodePort = protocol.CodePort

// KernelError is an exception raised by code run in a sandbox's kernel.
type KernelError struct {
	SandboxID, Name, Value string
}

func (e *KernelError) Error() string {
	return fmt.Sprintf("execute in %s: %s: %s", e.SandboxID, e.Name, e.Value)
}

// RunCode runs Python code in the sandbox's code interpreter through the
// server's proxy and returns what it printed to stdout; an exception of
// the kernel is a *KernelError. The request carries the sandbox's access
// token but not the API key, which the proxy would hand on into the
// sandbox.
func (c *Client) RunCode(ctx context.Context, sb *wire.Sandbox, code string) (string, error) {
	body, err := json.Marshal(map[string]string{"code": code})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/execute", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(CodePort))
	if sb.EnvdAccessToken != "" {
		req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("execute in %s: %w", sb.SandboxID, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return "", fmt.Errorf("execute in %s: %w", sb.SandboxID, err)
	}
	if res.StatusCode != http.StatusOK {
		where := fmt.Sprintf("/execute (sandbox %s, port %d)", sb.SandboxID, CodePort)
		return "", answerError(http.MethodPost, where, res.StatusCode, data)
	}
	return kernelOutput(sb.SandboxID, data)
}

// kernelOutput collects the stdout events of the kernel's answer, one JSON
// event a line, and stops at its first error.
func kernelOutput(sandboxID string, data []byte) (string, error) {
	var out strings.Builder
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Text  string `json:"text"`
			Name  string `json:"name"`
			Value string `json:"value"`
		}
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		switch ev.Type {
		case "stdout":
			out.WriteString(ev.Text)
		case "error":
			return out.String(), &KernelError{SandboxID: sandboxID, Name: ev.Name, Value: ev.Value}
		}
	}
	return out.String(), nil
}
