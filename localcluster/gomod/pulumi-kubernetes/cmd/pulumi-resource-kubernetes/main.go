// The Kubernetes provider's entry point. The provider's own cmd/pulumi-resource-kubernetes embeds two
// files its release build generates (the schema stamped with the version, and the Terraform mapping),
// which its Go module does not carry; localcluster.build writes them beside this file from the
// module's schema.json and terraform-mapping.json, and this package serves the provider with them.
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema-embed.json
var schema []byte

//go:embed terraform-mapping-embed.json
var terraformMapping []byte

func main() {
	provider.Serve("kubernetes", version.Version, schema, terraformMapping)
}
