package environment

// CondaPackages reads a conda environment file (file is its name, for
// messages) and returns its pip: list and the conda packages it needs
// other than python and pip, which only conda can install. Image builds use
// it to put a pip-only conda file on an image that has no conda.
func CondaPackages(file string, data []byte) (pip, condaOnly []string, err error) {
	cf, err := parseCondaFile(file, data)
	if err != nil {
		return nil, nil, err
	}
	for _, d := range cf.Deps {
		if d.Name != "python" && d.Name != "pip" {
			condaOnly = append(condaOnly, d.Name)
		}
	}
	return cf.Pip, condaOnly, nil
}
