"""Where training data comes from: the dataset catalog, the packaged datasets (digits, mnist5k), CIFAR,
image folders and synthetic batches. The input pipelines built from a suite live in `dstbench.inputs`."""
