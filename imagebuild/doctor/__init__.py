"""``imagebuild doctor``, the host side: what the image needs (from a recipe, an image's
manifest, or the manifest of the environment it runs in) and how the site launches it
(the site profile), handed to the probes of imagebuild.inimage.doctor, which also run
inside images.

- image_needs.py: ImageNeeds from a recipe, an image or a manifest file
- site_settings.py: DoctorSettings from a site profile and the environment
"""
