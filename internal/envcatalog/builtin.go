package envcatalog

// mcr is where Microsoft publishes its curated environments' images,
// publicly: mcr.microsoft.com/azureml/curated/NAME, tagged by the
// environment's version (and latest). These are Microsoft's images, not
// Ferry's; a site without access to mcr.microsoft.com maps the names to
// its own images in a catalog file.
const mcr = "mcr.microsoft.com/azureml/curated/"

// builtin lists the curated environments Azure ML's own example files use.
// Names are Azure's; Python versions and frameworks are those the names and
// Azure's documentation of them state.
var builtin = []Entry{
	{Name: "AzureML-sklearn-0.24-ubuntu18.04-py37-cpu", Description: "scikit-learn 0.24 on Ubuntu 18.04, CPU",
		Python: "3.7", Frameworks: []string{"scikit-learn 0.24"}, Repository: mcr + "sklearn-0.24-ubuntu18.04-py37-cpu"},
	{Name: "AzureML-sklearn-1.0-ubuntu20.04-py38-cpu", Description: "scikit-learn 1.0 on Ubuntu 20.04, CPU",
		Python: "3.8", Frameworks: []string{"scikit-learn 1.0"}, Repository: mcr + "sklearn-1.0-ubuntu20.04-py38-cpu"},
	{Name: "AzureML-sklearn-1.1", Description: "scikit-learn 1.1, CPU",
		Frameworks: []string{"scikit-learn 1.1"}, Repository: mcr + "sklearn-1.1"},
	{Name: "AzureML-sklearn-1.5", Description: "scikit-learn 1.5 with pandas, numpy and MLflow, CPU",
		Python: "3.10", Frameworks: []string{"scikit-learn 1.5", "MLflow"}, Repository: mcr + "sklearn-1.5"},
	{Name: "AzureML-lightgbm-3.2-ubuntu18.04-py37-cpu", Description: "LightGBM 3.2 on Ubuntu 18.04, CPU",
		Python: "3.7", Frameworks: []string{"LightGBM 3.2"}, Repository: mcr + "lightgbm-3.2-ubuntu18.04-py37-cpu"},
	{Name: "AzureML-pytorch-1.10-ubuntu18.04-py38-cuda11-gpu", Description: "PyTorch 1.10 on Ubuntu 18.04 with CUDA 11, GPU",
		Python: "3.8", Frameworks: []string{"PyTorch 1.10", "CUDA 11"}, Repository: mcr + "pytorch-1.10-ubuntu18.04-py38-cuda11-gpu"},
	{Name: "AzureML-tensorflow-2.4-ubuntu18.04-py37-cuda11-gpu", Description: "TensorFlow 2.4 on Ubuntu 18.04 with CUDA 11, GPU",
		Python: "3.7", Frameworks: []string{"TensorFlow 2.4", "CUDA 11"}, Repository: mcr + "tensorflow-2.4-ubuntu18.04-py37-cuda11-gpu"},
	{Name: "AzureML-acpt-pytorch-2.2-cuda12.1", Description: "Azure Container for PyTorch: PyTorch 2.2 with CUDA 12.1, DeepSpeed and ONNX Runtime training, GPU",
		Python: "3.10", Frameworks: []string{"PyTorch 2.2", "CUDA 12.1", "DeepSpeed", "ONNX Runtime"}, Repository: mcr + "acpt-pytorch-2.2-cuda12.1"},
	{Name: "AzureML-minimal-ubuntu22.04-py39-cpu-inference", Description: "a minimal Python 3.9 image for inference on Ubuntu 22.04, CPU",
		Python: "3.9", Frameworks: []string{"azureml-inference-server-http"}, Repository: mcr + "minimal-ubuntu22.04-py39-cpu-inference"},
}
