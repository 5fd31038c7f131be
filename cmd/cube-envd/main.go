// Command cube-envd is filled in by later work.
package main

import (
	"fmt"

	"cube/internal/version"
)

func main() { fmt.Println("cube-envd", version.Version) }
