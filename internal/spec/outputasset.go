package spec

// validateOutputAsset checks an output's name and version, which register
// it as a data asset when its job completes: a version needs a name, and
// both are a data asset's.
func validateOutputAsset(es *Errors, f, name, version string) {
	switch {
	case name == "" && version != "":
		es.add(f+".version", "registers the output as a data asset with name:; give the asset's name too, e.g. name: cleaned, version: %s", version)
	case name == "":
	case !envNameRe().MatchString(name):
		es.add(f+".name", "%s is not a valid data asset name: use letters, digits, '.', '-' and '_', starting with a letter or digit", quote(name))
	}
	switch {
	case version == "":
	case version == "latest":
		es.add(f+".version", "latest is a label, not a version: leave version out to get the next number")
	case !envNameRe().MatchString(version):
		es.add(f+".version", "%s is not a valid version: use letters, digits, '.', '-' and '_', such as 1 or 2.0; leave it out to get the next number", quote(version))
	}
}

// OutputAssetType is the data asset type an output of type t registers
// as: uri_file for a file, uri_folder for anything else (a folder, a
// model's folder).
func OutputAssetType(t string) string {
	if t == "uri_file" {
		return "uri_file"
	}
	return "uri_folder"
}
