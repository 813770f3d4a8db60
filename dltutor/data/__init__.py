"""data: the course's data sets, offline first.

  cifar10.py        `load_cifar10`: real CIFAR-10 (torchvision, md5 checks), else a labelled stand-in
  fashion_mnist.py  the real Fashion-MNIST (Debian's dataset-fashion-mnist), CIFAR-shaped: stand-in no. 1
  synthetic.py      the SYNTHETIC stand-ins (CIFAR-shaped images, last resort; fixed random batches)
  loaders.py        DataLoaders, tensors on the device, a device-resident loader
  staging.py        `python -m dltutor data stage --from DIR`: copy a shared copy, verify, describe
  roots.py          where a data set is read, and where one made on first use is written (per user
                    when the shared data folder is read-only)
Used by notebooks 01-03 and labs 01-03; imports only dltutor.core.
"""
