"""CI pipelines generated from the recipes: a GitHub Actions workflow and a GitLab CI file,
each building only the images a change affects."""
