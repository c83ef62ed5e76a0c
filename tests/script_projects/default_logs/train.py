"""Keras 3 model.fit with the TensorBoard callback's defaults: it writes to ./logs."""

import keras
import numpy as np

x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(loss="mse", optimizer="sgd")
model.fit(x, y, batch_size=16, epochs=3, callbacks=[keras.callbacks.TensorBoard()], verbose=2)
