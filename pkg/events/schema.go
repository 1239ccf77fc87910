package events

import (
	"embed"
	"io/fs"
)

// SchemaBase is the URL prefix of every schema's $id: the body of an event
// type is described by SchemaBase + ce-type + ".json".
const SchemaBase = "https://e31.dev/schema/"

//go:embed schema/*.json
var schemaFiles embed.FS

// Schemas returns the JSON Schemas of schema/: <ce-type>.json for the body of
// each event type, defs.json for the parts they share and envelope.json for
// the headers. They are the contract for systems outside the project, so a
// program may serve them or validate against them.
func Schemas() fs.FS {
	sub, err := fs.Sub(schemaFiles, "schema")
	if err != nil {
		panic(err) // unreachable: "schema" is a valid directory name
	}
	return sub
}
