"""The data layer: audio I/O, manifests, corpus loaders, the synthetic TTS corpus, augmentation."""
