VARIANT = "benign"
