// Command ferry is Ferry's one binary: workspace server, runner and CLI.
package main

import (
	"context"
	"os"

	"github.com/ferry-ml/ferry/internal/cli"
)

func main() {
	os.Exit(cli.Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
