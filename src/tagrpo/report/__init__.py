"""Reports: PNG plots and an HTML page from run directories."""
