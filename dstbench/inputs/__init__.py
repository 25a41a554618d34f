"""Input pipelines for a case, from its suite: synthetic batches on the device for speed (`speed`),
DataLoaders for real datasets (`loaders`), augmentation and the loss (`transforms`)."""
