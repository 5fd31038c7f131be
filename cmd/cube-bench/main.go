// Command cube-bench is filled in by later work.
package main

import (
	"fmt"

	"cube/internal/version"
)

func main() { fmt.Println("cube-bench", version.Version) }
