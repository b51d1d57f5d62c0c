"""Building blocks of the classifier: MLP backends, layout, time embedding, attention."""
