"""A small application on the brainhands public API: durable email notices."""
