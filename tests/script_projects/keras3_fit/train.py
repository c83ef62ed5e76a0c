"""model.fit with Keras 3 under MultiWorkerMirrored: Keras 3 cannot do it (refused before launch)."""

import keras
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(loss="mse", optimizer="sgd")
model.fit(np.zeros((8, 4)), np.zeros((8, 1)), epochs=1)
