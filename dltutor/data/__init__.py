"""data: the course's data sets, offline first.

  cifar10.py    real CIFAR-10 (torchvision) with md5 checks, or the labelled SYNTHETIC stand-in
  synthetic.py  the synthetic stand-ins (CIFAR-shaped images, fixed random batches)
  loaders.py    DataLoaders, tensors on the device, a device-resident loader
  staging.py    `python -m dltutor data stage --from DIR`: copy a shared copy, verify, describe
Used by notebooks 01-03 and labs 01-03; imports only dltutor.core.
"""
