package webui

import "cube/internal/hoststat"

// hostReader reads the machine's CPU and memory from a procfs.
type hostReader struct{ proc string }

func (r hostReader) read() Host {
	s := hoststat.Read(r.proc)
	return Host{CPUs: s.CPUs, CPUBusySeconds: s.CPUBusySeconds, CPUTotalSeconds: s.CPUTotalSeconds,
		MemTotalBytes: s.MemTotalBytes, MemAvailBytes: s.MemAvailableBytes}
}
