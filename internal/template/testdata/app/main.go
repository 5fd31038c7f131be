// Command app is the start command of the test image: it records how it
// was started (user, directory, arguments, environment) in /tmp/app-state
// and answers GET /ready with 200 on :8080, the build's probe.
package main

import (
	"fmt"
	"net/http"
	"os"
	"strings"
)

func main() {
	cwd, _ := os.Getwd()
	state := fmt.Sprintf("uid=%d\ncwd=%s\nargs=%s\nGREETING=%s\nEXTRA=%s\n",
		os.Getuid(), cwd, strings.Join(os.Args[1:], " "), os.Getenv("GREETING"), os.Getenv("EXTRA"))
	if err := os.WriteFile("/tmp/app-state", []byte(state), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		os.Exit(1)
	}
	// Any answer is 200: the probe only needs one.
	http.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ready") })
	if err := http.ListenAndServe(":8080", nil); err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		os.Exit(1)
	}
}
