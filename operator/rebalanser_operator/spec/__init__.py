"""The ResourceGroup's spec and its CRD: the pydantic models (``models``), the CRD generated from them
(``crdgen``, run as ``python -m rebalanser_operator.spec.crdgen``), and the check that a new CRD still
admits every object stored under the old one (``crdcompat``)."""
