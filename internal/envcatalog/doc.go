// Package envcatalog is the catalog of curated environments: the names of
// Azure ML's built-in environments (AzureML-sklearn-1.0-ubuntu20.04-py38-cpu,
// sklearn-1.5 in the azureml registry) mapped to the container images that
// hold their software.
//
// The built-in catalog maps them to Microsoft's public curated images on
// mcr.microsoft.com, so Azure ML job files that name a curated environment
// run unchanged wherever those images can be pulled; a site's catalog file
// replaces entries or adds its own (a mirror, an image built in-house). Like
// the size catalog, everything here is pure data and functions of it: no
// I/O, no clock.
package envcatalog
